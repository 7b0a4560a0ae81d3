package istio

import "testing"

func TestAmbient(t *testing.T) {
	amb := map[string]string{LabelDataplaneMode: DataplaneModeAmbient}
	for _, c := range []struct {
		name     string
		ns, pod  map[string]string
		want     bool
		whyEmpty bool
	}{
		{"namespace ambient", amb, nil, true, true},
		{"pod ambient in a plain namespace", nil, amb, true, true},
		{"plain", nil, nil, false, false},
		{"opted out", amb, map[string]string{LabelDataplaneMode: DataplaneModeNone}, false, false},
		{"waypoint by managed label", amb, map[string]string{LabelGatewayManaged: GatewayManagedWaypoint}, false, false},
		{"waypoint by gateway name", amb, map[string]string{LabelGatewayName: "wp"}, false, false},
	} {
		got, why := Ambient(c.ns, c.pod)
		if got != c.want || (why == "") != c.whyEmpty {
			t.Errorf("%s: Ambient = %v %q, want %v (reason given: %v)", c.name, got, why, c.want, !c.whyEmpty)
		}
	}
}
