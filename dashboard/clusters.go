package dashboard

import (
	"net/http"
	"time"

	"github.com/nodewise/nodewise/clusters"
)

// clustersData is the /clusters page: where the mesh stands in every
// cluster the dashboard reads, as `nodewise fleet` prints it.
type clustersData struct {
	Reports []clusters.Report
	// ReadAt is when the clusters were read (the page reads them anew on
	// each load; it has no live stream).
	ReadAt string
}

func (s *Server) clustersPage(r *http.Request) (pageData, string, any, int) {
	pd := pageData{Title: "Clusters", Crumbs: []link{{"Clusters", ""}}}
	return pd, "clusters.html", clustersData{Reports: s.cfg.Clusters(r.Context()), ReadAt: s.cfg.Now().UTC().Format(time.RFC3339)}, http.StatusOK
}
