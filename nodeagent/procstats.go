package nodeagent

import (
	"fmt"
	"strconv"
	"strings"
)

// parseNetStats parses /proc/<pid>/net/snmp or /proc/<pid>/net/netstat: pairs
// of lines "Prefix: name name…" and "Prefix: value value…".
func parseNetStats(content string) (map[string]map[string]uint64, error) {
	out := map[string]map[string]uint64{}
	lines := strings.Split(strings.TrimSpace(content), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names := strings.Fields(lines[i])
		values := strings.Fields(lines[i+1])
		if len(names) == 0 || len(names) != len(values) || names[0] != values[0] {
			return nil, fmt.Errorf("line %d: header and values do not pair up", i+1)
		}
		prefix := strings.TrimSuffix(names[0], ":")
		m := out[prefix]
		if m == nil {
			m = map[string]uint64{}
			out[prefix] = m
		}
		for j := 1; j < len(names); j++ {
			// Some fields (Tcp MaxConn) are signed: -1 reads as 0.
			v, err := strconv.ParseInt(values[j], 10, 64)
			if err != nil {
				u, uerr := strconv.ParseUint(values[j], 10, 64)
				if uerr != nil {
					return nil, fmt.Errorf("line %d: field %s: %w", i+2, names[j], err)
				}
				m[names[j]] = u
				continue
			}
			if v > 0 {
				m[names[j]] = uint64(v)
			} else {
				m[names[j]] = 0
			}
		}
	}
	return out, nil
}

// procCounts are the per-namespace TCP MIB counters the fallback uses.
type procCounts struct {
	OutRsts      uint64 // Tcp OutRsts: every reset sent
	EstabResets  uint64 // Tcp EstabResets: ESTABLISHED/CLOSE_WAIT → CLOSE, by a reset received or an abort
	AttemptFails uint64 // Tcp AttemptFails: SYN_SENT/SYN_RECV → CLOSE
	ActiveOpens  uint64 // Tcp ActiveOpens: connect() calls that sent a SYN
	PassiveOpens uint64 // Tcp PassiveOpens: LISTEN → SYN_RECV
	RetransSegs  uint64 // Tcp RetransSegs
	Aborts       uint64 // TcpExt TCPAbortOn{Close,Linger,Timeout,Memory}: local aborts counted in EstabResets
}

func procCountsFrom(snmp, netstat map[string]map[string]uint64) procCounts {
	tcp, ext := snmp["Tcp"], netstat["TcpExt"]
	return procCounts{
		OutRsts:      tcp["OutRsts"],
		EstabResets:  tcp["EstabResets"],
		AttemptFails: tcp["AttemptFails"],
		ActiveOpens:  tcp["ActiveOpens"],
		PassiveOpens: tcp["PassiveOpens"],
		RetransSegs:  tcp["RetransSegs"],
		Aborts:       ext["TCPAbortOnClose"] + ext["TCPAbortOnLinger"] + ext["TCPAbortOnTimeout"] + ext["TCPAbortOnMemory"],
	}
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// delta is what happened between base and cur.
func (cur procCounts) delta(base procCounts) procCounts {
	return procCounts{
		OutRsts:      sub(cur.OutRsts, base.OutRsts),
		EstabResets:  sub(cur.EstabResets, base.EstabResets),
		AttemptFails: sub(cur.AttemptFails, base.AttemptFails),
		ActiveOpens:  sub(cur.ActiveOpens, base.ActiveOpens),
		PassiveOpens: sub(cur.PassiveOpens, base.PassiveOpens),
		RetransSegs:  sub(cur.RetransSegs, base.RetransSegs),
		Aborts:       sub(cur.Aborts, base.Aborts),
	}
}
