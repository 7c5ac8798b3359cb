package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/workflows"
)

// TestSecretsStayOnTheWorker is the attack of a hook that prints its
// environment, and the worker's: the storage secret sits in the worker's
// environment (DROVER_EAST_CSI_key, as an operator sets it), the plan
// names it so that the worker resolves it and sends it with every call,
// and the workloads' hooks print `env` and the worker's own environment. The secret must appear nowhere: not in any
// history (every payload decoded, compressed ones included), not in the
// worker's log or Temporal's database, not in drctl's text or JSON.
//
// The worker also holds a secret no plan names (DROVER_E2E_API_TOKEN, as
// TEMPORAL_API_KEY would be), which the hooks read from its environment
// all the same: it is redacted from the start too.
func TestSecretsStayOnTheWorker(t *testing.T) {
	raw := make([]byte, 12)
	_, _ = rand.Read(raw)
	secret := "cephx-" + hex.EncodeToString(raw)
	t.Setenv("DROVER_EAST_CSI_key", secret)
	t.Setenv("DROVER_WEST_CSI_key", secret)
	// A secret of the worker's no plan names (as TEMPORAL_API_KEY): a hook
	// can read it all the same.
	_, _ = rand.Read(raw)
	token := "tok-" + hex.EncodeToString(raw)
	t.Setenv("DROVER_E2E_API_TOKEN", token)
	endpoint := regexp.MustCompile(`(?m)^  - name: (east|west)\n    storage: \{endpoint: ("[^"]+")\}`)
	h := startWith(t, 2, 2, func(plan string) string {
		plan = endpoint.ReplaceAllStringFunc(plan, func(m string) string {
			site := endpoint.FindStringSubmatch(m)[1]
			return strings.TrimSuffix(m, "}") + ", secret: {env: DROVER_" + strings.ToUpper(site) + "_CSI}}"
		})
		dumpEnv := `env; tr '\\0' '\\n' < /proc/$PPID/environ | grep '_CSI_\\|_TOKEN='; `
		plan = strings.ReplaceAll(plan, `{start: "touch `, `{start: "`+dumpEnv+`touch `)
		return strings.ReplaceAll(plan, `stop: "rm -f `, `stop: "`+dumpEnv+`rm -f `)
	}, nil)
	if b, _ := os.ReadFile(h.plan); !bytes.Contains(b, []byte("secret: {env: DROVER_WEST_CSI}")) || !bytes.Contains(b, []byte("environ")) {
		t.Fatalf("the plan does not name the secret or dump the environment:\n%s", b)
	}

	var outputs []string
	run := func(args ...string) string {
		out := h.must(args...)
		outputs = append(outputs, out)
		return out
	}
	run("protect", "start", h.plan, "--primary", "east", "--interval", "1s")
	h.waitProtected("e2e", 2)
	h.syncedAndIdle()
	run("drill", h.plan, "--to", "west", "--wait")
	run("failover", h.plan, "--to", "west", "--yes", "--wait")
	text := run("status", "e2e")
	js := run("status", "e2e", "-o", "json")
	run("list")
	run("list", "-o", "json")
	run("watch", "e2e", "-o", "json")
	// The hooks did print their environment: the step kept it.
	if !strings.Contains(js, "DROVER_HOOK=start") || !strings.Contains(text+js, "[redacted]") || !strings.Contains(js, "DROVER_E2E_API_TOKEN=[redacted]") {
		t.Fatalf("the start hook's environment dump is not in the status (or nothing was redacted):\n%s", js)
	}
	if strings.Contains(js, "TEMPORAL_ADDRESS") {
		t.Errorf("the start hook saw the worker's TEMPORAL_ADDRESS:\n%s", js)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var history bytes.Buffer
	for _, id := range []string{workflows.ActionID("e2e"), workflows.ProtectID("e2e")} {
		it := h.c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		events := 0
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			events++
			b, _ := proto.Marshal(ev)
			history.Write(b)
			j, _ := protojson.Marshal(ev)
			history.Write(j)
			decodePayloads(t, ev.ProtoReflect(), &history)
		}
		if events < 5 {
			t.Fatalf("history of %s has %d events", id, events)
		}
	}
	if !bytes.Contains(history.Bytes(), []byte("DROVER_HOOK=")) {
		t.Fatal("the decoded histories do not hold the hooks' output: the search below would prove nothing")
	}
	logs, err := os.ReadFile(filepath.Join(h.st.Dir, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The database and its write-ahead log, which holds the commits not
	// yet copied into the database.
	db, err := os.ReadFile(filepath.Join(h.st.Dir, "temporal.db"))
	if err != nil {
		t.Fatal(err)
	}
	if wal, err := os.ReadFile(filepath.Join(h.st.Dir, "temporal.db-wal")); err == nil {
		db = append(db, wal...)
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if !bytes.Contains(db, []byte(workflows.ActionID("e2e"))) {
		t.Fatal("Temporal's database and its log do not name the action: the search below would prove nothing")
	}
	places := map[string][]byte{"the histories": history.Bytes(), "the worker's log": logs, "Temporal's database": db,
		"drctl's output": []byte(strings.Join(outputs, "\n"))}
	for name, b := range places {
		for _, s := range []string{secret, token} {
			if bytes.Contains(b, []byte(s)) {
				i := bytes.Index(b, []byte(s))
				t.Errorf("a secret is in %s: …%q…", name, b[max(0, i-200):i+len(s)])
			}
		}
	}
}

// decodePayloads writes every payload in m, decoded through Drover's
// codec (compressed ones decompressed), to w.
func decodePayloads(t *testing.T, m protoreflect.Message, w *bytes.Buffer) {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		dec, err := codec.Codec().Decode([]*commonpb.Payload{p})
		if err != nil {
			t.Fatalf("decode a payload: %v", err)
		}
		w.Write(dec[0].GetData())
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				decodePayloads(t, v.List().Get(i).Message(), w)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				decodePayloads(t, mv.Message(), w)
				return true
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			decodePayloads(t, v.Message(), w)
		}
		return true
	})
}
