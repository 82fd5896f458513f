package httpbench

import (
	"fmt"
	"syscall"
)

// raiseFDLimit sets this process's open-file soft limit to the hard one.
// Go already raises it at start-up (since 1.19) but then hands children the
// original soft limit, unless the program set the limit itself: setting it
// here, even to the value it has, gives the server child the raised limit
// too. The client needs few descriptors for the watches themselves (a
// connection per 100 streams); the server needs one per connection plus
// its etcd clients.
func raiseFDLimit() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", l.Max, err)
	}
	return nil
}
