package main

import "syscall"

// childAttr kills a bench process when the bench dies.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
