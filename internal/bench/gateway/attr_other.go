//go:build !linux

package main

import "syscall"

// childAttr: without Pdeathsig the bench's own cleanup stops its processes.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
