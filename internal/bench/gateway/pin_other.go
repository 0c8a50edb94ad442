//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

var errPin = errors.New("pinning processes to CPUs needs Linux")

// startOn is not supported here: -placement split fails.
func startOn(cmd *exec.Cmd, cpu int) error { return errPin }

// pinSelf is not supported here: -placement split fails.
func pinSelf(cpu int) error { return errPin }
