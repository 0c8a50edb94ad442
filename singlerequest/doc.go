// Package singlerequest will hold the single-request coordinator the Edge
// runs for one Anthropic Messages request against an execution preset:
// workspace admission, then Plan, Work and Review stages on a Node's
// workspace, exactly one cleanup and exactly one public terminal.
//
// Private stage content (plans, tool traffic, reviews) must never reach the
// caller or a log. It is filled in by a later step.
package singlerequest
