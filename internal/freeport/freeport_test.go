package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsBelowTheEphemeralRange(t *testing.T) {
	top := ephemeralStart()
	if top-lowest < 1000 {
		t.Skipf("the ephemeral range starts at %d: no room below it, the kernel picks", top)
	}
	ports, err := Ports(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lowest || p >= top {
			t.Errorf("port %d outside [%d, %d), where no bind(0) or outgoing connection takes it", p, lowest, top)
		}
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d: %v, want free once Ports returned", p, err)
			continue
		}
		l.Close()
	}
}
