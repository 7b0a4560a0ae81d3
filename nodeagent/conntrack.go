package nodeagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ctnetlink (linux/netfilter/nfnetlink_conntrack.h): a conntrack entry is
// asked for by its original tuple and answered with both tuples.
const (
	ctnlSubsys  = 1 // NFNL_SUBSYS_CTNETLINK
	ctnlGet     = 1 // IPCTNL_MSG_CT_GET
	ctaTupleOrg = 1 // CTA_TUPLE_ORIG
	ctaTupleRep = 2 // CTA_TUPLE_REPLY
	ctaTupleIP  = 1 // CTA_TUPLE_IP
	ctaTupleL4  = 2 // CTA_TUPLE_PROTO
	ctaIPv4Src  = 1 // CTA_IP_V4_SRC
	ctaIPv4Dst  = 2 // CTA_IP_V4_DST
	ctaIPv6Src  = 3 // CTA_IP_V6_SRC
	ctaIPv6Dst  = 4 // CTA_IP_V6_DST
	ctaL4Num    = 1 // CTA_PROTO_NUM
	ctaL4Src    = 2 // CTA_PROTO_SRC_PORT
	ctaL4Dst    = 3 // CTA_PROTO_DST_PORT
)

// ctTuple is one direction of a TCP conntrack entry.
type ctTuple struct{ src, dst netip.AddrPort }

// errNoConntrack: the namespace's conntrack table has no entry for the
// connection.
var errNoConntrack = errors.New("no conntrack entry")

// conntrackReply returns the reply tuple of the namespace's conntrack entry
// whose original tuple is the TCP connection local → remote: for a connect
// redirected to ztunnel, src is where it was redirected to (port 15001) and
// dst the address and port ztunnel's accepted socket sees as its peer (the
// app's own, unless NAT had to pick another source port because that reply
// tuple was taken).
func conntrackReply(netnsFd int, local, remote netip.AddrPort) (ctTuple, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: netnsFd})
	if err != nil {
		return ctTuple{}, fmt.Errorf("opening ctnetlink: %w", err)
	}
	defer c.Close()
	family := uint8(unix.AF_INET)
	if local.Addr().Is6() {
		family = unix.AF_INET6
	}
	ae := netlink.NewAttributeEncoder()
	ae.Nested(ctaTupleOrg, func(ae *netlink.AttributeEncoder) error {
		encodeTuple(ae, ctTuple{local, remote})
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return ctTuple{}, err
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(ctnlSubsys<<8 | ctnlGet), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append([]byte{family, unix.NFNETLINK_V0, 0, 0}, attrs...), // struct nfgenmsg
	})
	if errors.Is(err, unix.ENOENT) {
		return ctTuple{}, errNoConntrack
	}
	if err != nil {
		return ctTuple{}, fmt.Errorf("asking ctnetlink for %s → %s: %w", local, remote, err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		if t, ok, err := replyTuple(m.Data[4:]); err != nil || ok {
			return t, err
		}
	}
	return ctTuple{}, errNoConntrack
}

func encodeTuple(ae *netlink.AttributeEncoder, t ctTuple) {
	src, dst := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
	if t.src.Addr().Is6() {
		src, dst = ctaIPv6Src, ctaIPv6Dst
	}
	ae.Nested(ctaTupleIP, func(ae *netlink.AttributeEncoder) error {
		ae.Bytes(src, t.src.Addr().AsSlice())
		ae.Bytes(dst, t.dst.Addr().AsSlice())
		return nil
	})
	ae.Nested(ctaTupleL4, func(ae *netlink.AttributeEncoder) error {
		ae.Uint8(ctaL4Num, unix.IPPROTO_TCP)
		ae.Bytes(ctaL4Src, binary.BigEndian.AppendUint16(nil, t.src.Port()))
		ae.Bytes(ctaL4Dst, binary.BigEndian.AppendUint16(nil, t.dst.Port()))
		return nil
	})
}

// replyTuple finds CTA_TUPLE_REPLY in a conntrack entry's attributes.
func replyTuple(b []byte) (ctTuple, bool, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return ctTuple{}, false, err
	}
	var t ctTuple
	found := false
	for ad.Next() {
		if ad.Type() != ctaTupleRep {
			continue
		}
		found = true
		ad.Nested(func(nad *netlink.AttributeDecoder) error {
			var sa, da netip.Addr
			var sp, dp uint16
			for nad.Next() {
				switch nad.Type() {
				case ctaTupleIP:
					nad.Nested(func(iad *netlink.AttributeDecoder) error {
						for iad.Next() {
							a, _ := netip.AddrFromSlice(iad.Bytes())
							switch iad.Type() {
							case ctaIPv4Src, ctaIPv6Src:
								sa = a.Unmap()
							case ctaIPv4Dst, ctaIPv6Dst:
								da = a.Unmap()
							}
						}
						return nil
					})
				case ctaTupleL4:
					nad.Nested(func(pad *netlink.AttributeDecoder) error {
						for pad.Next() {
							switch pad.Type() {
							case ctaL4Src:
								sp = binary.BigEndian.Uint16(pad.Bytes())
							case ctaL4Dst:
								dp = binary.BigEndian.Uint16(pad.Bytes())
							}
						}
						return nil
					})
				}
			}
			t = ctTuple{netip.AddrPortFrom(sa, sp), netip.AddrPortFrom(da, dp)}
			return nil
		})
	}
	return t, found, ad.Err()
}
