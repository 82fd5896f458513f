// Package freeport finds loopback TCP ports that are free to bind, for the
// embedded etcds and the sample apiservers that tests, benchmarks and the
// soak start. It is the only copy: everything else asks here.
package freeport

import (
	"fmt"
	"net"
	"strconv"
)

// Ports returns n distinct loopback TCP ports that were free when it
// returned: it holds all n probe listeners open at once, then closes them.
// Something else may bind a port before the caller does.
func Ports(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Port returns one free loopback TCP port, as Ports(1) does.
func Port() (int, error) {
	ports, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Free reports whether port can be bound on loopback right now.
func Free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
