package dashboard

import (
	"fmt"
	"time"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// FieldManager owns what the dashboard's actions set.
const FieldManager = "nodewise-dashboard"

// actionPatch is the merge patch of one action, the same as the CLI's
// command of that name, and the words that say it was done.
func actionPatch(verb string, now time.Time) ([]byte, string, error) {
	switch verb {
	case "pause":
		return []byte(`{"spec":{"paused":true}}`), "paused", nil
	case "resume":
		token := now.UTC().Format(time.RFC3339Nano)
		return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"paused":false}}`, model.AnnotationResumeToken, token), "resumed", nil
	case "abort":
		return []byte(`{"spec":{"abort":true}}`), "aborting", nil
	case "rollback":
		return []byte(`{"spec":{"rollback":true}}`), "rolling back", nil
	}
	return nil, "", fmt.Errorf("unknown action %q: pause, resume, abort or rollback", verb)
}
