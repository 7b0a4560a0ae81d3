package wire

// GateResult is what one external gate found about one node.
type GateResult struct {
	// Failures are the thresholds crossed, one reason each: any fails the interval.
	Failures []string
	// NoData are the queries that returned nothing to compare (no series,
	// or only NaN samples), one reason each. The gate could look but saw
	// nothing, so the node cannot pass on it: the verdict is Inconclusive,
	// whatever gates.inconclusive says about too little traffic.
	NoData []string
}
