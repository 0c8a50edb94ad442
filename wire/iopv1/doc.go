// Package iopv1 is the generated Go code for the IOP wire schema in
// wire/proto/iop/v1. Do not edit the .pb.go files: change the .proto files
// and run `make proto`. Package wire owns framing and session rules; this
// package only holds the message types.
package iopv1
