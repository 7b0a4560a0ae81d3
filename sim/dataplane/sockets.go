package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// markedListenConfig sets SO_REUSEPORT and SO_MARK on a listener, as
// ztunnel's in-pod listeners do (accepted sockets inherit the mark).
var markedListenConfig = net.ListenConfig{Control: markControl(true)}

// markedDialer marks the stand-in's upstream connections so the redirect
// rules let them through.
var markedDialer = net.Dialer{Timeout: 3 * time.Second, Control: markControl(false)}

func markControl(reusePort bool) func(_, _ string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if reusePort {
				if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
					return
				}
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, ZtunnelMark)
		})
		return errors.Join(err, serr)
	}
}

// listenIn opens a marked SO_REUSEPORT listener on port inside a namespace.
func listenIn(netns string, port int) (net.Listener, error) {
	var l net.Listener
	err := inNetns(netns, func() error {
		var err error
		l, err = markedListenConfig.Listen(context.Background(), "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	return l, err
}

// dialIn opens a marked connection to addr from inside a namespace.
func dialIn(netns, addr string) (*net.TCPConn, error) {
	var c net.Conn
	err := inNetns(netns, func() error {
		var err error
		c, err = markedDialer.Dial("tcp4", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// originalDst is where a redirected connection was headed (SO_ORIGINAL_DST).
func originalDst(c *net.TCPConn) (string, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var addr string
	var gerr error
	err = raw.Control(func(fd uintptr) {
		// SO_ORIGINAL_DST returns a sockaddr_in; the IPv6Mreq getter reads 16 bytes.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			gerr = err
			return
		}
		b := m.Multiaddr
		port := binary.BigEndian.Uint16(b[2:4])
		addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port).String()
	})
	return addr, errors.Join(err, gerr)
}

// resetConn closes c with a TCP reset (SO_LINGER 0).
func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// gotRST reports whether err means a reset arrived: the connection was
// reset, or a connect was refused (the SYN answered by a reset).
func gotRST(err error) bool {
	return isReset(err) || errors.Is(err, syscall.ECONNREFUSED)
}

// isReset reports whether err means the peer reset the connection.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
