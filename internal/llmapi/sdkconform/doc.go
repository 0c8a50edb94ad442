// Package sdkconform holds tests only: they read llmapi's translated
// answers, streamed and whole, with the official OpenAI and Anthropic Go
// SDKs' own types and accumulators, as those clients will. They live
// apart from llmapi's tests so that building those (fuzzing builds them
// instrumented, from scratch on a fresh machine) does not build the SDKs.
package sdkconform
