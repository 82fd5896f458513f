// Package freeport finds loopback TCP ports that are free to bind, for the
// embedded etcds and the sample apiservers that tests, benchmarks and the
// soak start. It is the only copy: everything else asks here.
//
// Ports come from below the kernel's ephemeral range where there is room:
// a port the kernel hands out for bind(0) or as the source port of an
// outgoing connection could be taken by any process (thousands of test
// connections, another test binary) between the probe here and the
// caller's bind, or while a stopped etcd member waits to be restarted on
// it. Above that, ports are picked at random, so two processes probing at
// once rarely meet.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the bottom of the range picked from, clear of the well-known
// ports and of what servers commonly listen on.
const lowest = 10000

// attempts bounds the random probes for one port before falling back to
// the kernel's choice.
const attempts = 200

// Ports returns n distinct loopback TCP ports that were free when it
// returned: it holds all n probe listeners open at once, then closes them.
// Something else may bind a port before the caller does.
func Ports(n int) ([]int, error) {
	top := ephemeralStart()
	ports := make([]int, 0, n)
	for range n {
		l, err := listenLow(top)
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenLow binds a random free port in [lowest, top), or one the kernel
// picks when that range is too small or taken.
func listenLow(top int) (net.Listener, error) {
	if top-lowest >= 1000 {
		for range attempts {
			port := lowest + rand.IntN(top-lowest)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (Linux's ip_local_port_range; elsewhere the IANA range's start).
func ephemeralStart() int {
	const iana = 49152
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return iana
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return iana
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return iana
	}
	return low
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
