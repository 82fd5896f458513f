package netfault

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
)

// OwnerPID names which of pids holds the other end of c, a connection
// accepted over IPv4 loopback: it finds the dialer's socket in
// /proc/net/tcp (local address c's remote, remote address c's local) and
// the process with that socket among its descriptors. Linux only. It tells
// apart connections dialed by different processes to one address (etcd
// members all dial a member at the one peer URL it advertises).
func OwnerPID(c net.Conn, pids []int) (int, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("not a TCP connection: %v", c.LocalAddr())
	}
	inode, err := socketInode(remote, local)
	if err != nil {
		return 0, err
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // gone
		}
		for _, e := range entries {
			if target, err := os.Readlink(dir + "/" + e.Name()); err == nil && target == want {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process of %v holds the socket %s -> %s", pids, remote, local)
}

// socketInode is the inode of the IPv4 TCP socket from local to remote.
func socketInode(local, remote *net.TCPAddr) (string, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	l, r := procAddr(local), procAddr(remote)
	if l == "" || r == "" {
		return "", fmt.Errorf("not IPv4: %v -> %v", local, remote)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) >= 10 && fields[1] == l && fields[2] == r {
			return fields[9], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no socket %v -> %v in /proc/net/tcp", local, remote)
}

// procAddr is a as /proc/net/tcp writes it: the IPv4 address as a
// little-endian hex word, then the port in hex.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	word := uint32(ip[0]) | uint32(ip[1])<<8 | uint32(ip[2])<<16 | uint32(ip[3])<<24
	return fmt.Sprintf("%08X:%04X", word, a.Port)
}
