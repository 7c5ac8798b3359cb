package activities_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

func TestEnvFileSecrets(t *testing.T) {
	dir := t.TempDir()
	kv := filepath.Join(dir, "kv")
	mustOK(t, os.WriteFile(kv, []byte("# ceph user\nuserID = admin\nuserKey=AQD+key==\n\n"), 0o600))
	ym := filepath.Join(dir, "yaml")
	mustOK(t, os.WriteFile(ym, []byte("userID: admin\nuserKey: \"AQD: key\"\n"), 0o600))
	bad := filepath.Join(dir, "bad")
	mustOK(t, os.WriteFile(bad, []byte("userKey: [hunter2-value\n"), 0o600))
	r := activities.EnvFileSecrets{Environ: func() []string {
		return []string{"EAST_CSI_userID=admin", "EAST_CSI_userKey=from-env", "EAST_CSIX_other=no", "PATH=/bin"}
	}}

	for _, tc := range []struct {
		name string
		ref  *plans.SecretRef
		want map[string]string
		err  string
	}{
		{"none", nil, nil, ""},
		{"env prefix", &plans.SecretRef{Env: "EAST_CSI"}, map[string]string{"userID": "admin", "userKey": "from-env"}, ""},
		{"key=value file", &plans.SecretRef{File: kv}, map[string]string{"userID": "admin", "userKey": "AQD+key=="}, ""},
		{"yaml file", &plans.SecretRef{File: ym}, map[string]string{"userID": "admin", "userKey": "AQD: key"}, ""},
		{"file over env", &plans.SecretRef{Env: "EAST_CSI", File: kv}, map[string]string{"userID": "admin", "userKey": "AQD+key=="}, ""},
		{"env unset", &plans.SecretRef{Env: "WEST_CSI"}, nil, "no environment variable WEST_CSI_* is set on this worker"},
		{"missing file", &plans.SecretRef{File: filepath.Join(dir, "nope")}, nil, "secret file " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{"malformed file", &plans.SecretRef{File: bad}, nil, "secret file " + bad + ": want key=value lines or a YAML map of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Resolve(tc.ref)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error %q carries a secret value", err)
				}
				return
			}
			mustOK(t, err)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// leakResult is what the leak workflow returns: every error message it
// saw, so that they land in the history too.
type leakResult struct {
	Errors []string `json:"errors"`
}

// leakWorkflow makes the calls that carry secrets, on both sites, and one
// call whose plugin error echoes the secret.
func leakWorkflow(ctx workflow.Context, p *plans.Plan) (leakResult, error) {
	var st *activities.Storage
	var res leakResult
	call := func(site, rpc string, fn, in any) error {
		c := workflow.WithActivityOptions(ctx, activities.CallOptions(p, site, rpc))
		return workflow.ExecuteActivity(c, fn, in).Get(c, nil)
	}
	for _, site := range []string{"a", "b"} {
		ins, err := activities.ReplicationInputs(p, site, "db", activities.RPCEnableVolumeReplication, false)
		if err != nil {
			return res, err
		}
		if err := call(site, activities.RPCEnableVolumeReplication, st.EnableVolumeReplication, ins[0]); err != nil {
			return res, err
		}
	}
	info, _ := activities.ReplicationInputs(p, "a", "db", activities.RPCGetVolumeReplicationInfo, false)
	c := workflow.WithActivityOptions(ctx, activities.PollOptions(p, "a", activities.RPCGetVolumeReplicationInfo, time.Minute))
	if err := workflow.ExecuteActivity(c, st.WaitForSync, activities.WaitSyncInput{Call: info[0], Interval: 20 * time.Millisecond}).Get(c, nil); err != nil {
		return res, err
	}
	fe, _ := activities.EndpointFor(p, "b", activities.RPCListClusterFence)
	if err := call("b", activities.RPCListClusterFence, st.ListClusterFence, activities.FenceListInput{Endpoint: fe}); err != nil {
		return res, err
	}
	// The simulator answers this one with an error that quotes the key.
	fe, _ = activities.EndpointFor(p, "a", activities.RPCFenceClusterNetwork)
	err := call("a", activities.RPCFenceClusterNetwork, st.FenceClusterNetwork, activities.FenceInput{Endpoint: fe, CIDRs: []string{"127.0.0.2/32"}})
	if err == nil {
		return res, temporal.NewApplicationError("the fault that echoes the key did not fire", "TestSetup")
	}
	res.Errors = append(res.Errors, err.Error())
	return res, nil
}

// TestSecretsStayOnTheWorker runs storage calls that need a secret through
// the real Temporal dev server, with one site's secret in the worker's
// environment and the other's in a file, and one plugin error that echoes
// the secret. The calls succeed (so the secret was sent), and the secret
// appears nowhere in the workflow history or in the worker's logs.
func TestSecretsStayOnTheWorker(t *testing.T) {
	raw := make([]byte, 12)
	_, _ = rand.Read(raw)
	secret := "drover-key-" + hex.EncodeToString(raw)

	logs := &simtest.Buffer{}
	logger := log.NewStructuredLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	srv := devserver.Start(t, logger)

	a, b := simtest.StartPair(t, simtest.Options{Secrets: map[string]string{"userKey": secret}, Interval: 20 * time.Millisecond})
	setFaults(t, a, sim.FaultRule{Method: activities.RPCFenceClusterNetwork, Code: "UNKNOWN", Count: 1,
		Message: "cephx: key " + secret + " rejected by the monitor"})
	t.Setenv("DROVER_LEAKTEST_userKey", secret)
	file := filepath.Join(t.TempDir(), "west.secret")
	mustOK(t, os.WriteFile(file, []byte("userKey: "+secret+"\n"), 0o600))
	p := pairPlan(a, b)
	p.Sites[0].Storage.Secret = &plans.SecretRef{Env: "DROVER_LEAKTEST"}
	p.Sites[1].Storage.Secret = &plans.SecretRef{File: file}

	st := newStorage(t)
	w := worker.New(srv.Client, "leak-test", worker.Options{})
	w.RegisterActivity(st)
	w.RegisterWorkflow(leakWorkflow)
	mustOK(t, w.Start())
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "leak-test", TaskQueue: "leak-test"}, leakWorkflow, p)
	mustOK(t, err)
	var res leakResult
	mustOK(t, run.Get(ctx, &res))
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "[redacted]") || !strings.Contains(res.Errors[0], activities.RPCFenceClusterNetwork) {
		t.Fatalf("workflow errors %q: want the fence failure with the key redacted", res.Errors)
	}

	var history, wire bytes.Buffer
	it := srv.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	events := 0
	for it.HasNext() {
		ev, err := it.Next()
		mustOK(t, err)
		events++
		j, err := protojson.Marshal(ev)
		mustOK(t, err)
		history.Write(j)
		bin, err := proto.Marshal(ev)
		mustOK(t, err)
		wire.Write(bin)
	}
	if events < 10 || !strings.Contains(history.String(), "FenceClusterNetwork") {
		t.Fatalf("history of %d events does not look like the run", events)
	}
	if !strings.Contains(logs.String(), "storage call failed") {
		t.Fatalf("the worker's logs were not captured:\n%s", logs.String())
	}
	for name, text := range map[string]string{"history (JSON)": history.String(), "history (wire)": wire.String(), "worker logs": logs.String()} {
		if strings.Contains(text, secret) {
			t.Errorf("the secret appears in the %s", name)
		}
	}
	if t.Failed() {
		return
	}
	// The calls were authenticated: the simulator saw the key.
	if f := a.FaultCounts()[activities.RPCFenceClusterNetwork+":Unknown"]; f != 1 {
		t.Fatalf("the echoing fault fired %d times, want 1", f)
	}
}

// TestRememberEnvSecrets: the values of the worker's variables whose
// names say they hold a secret are redacted from the start; other
// values, short ones, those of variables that name a secret (a
// directory, a file, an id) or say something of it, and the working
// directories (PWD, OLDPWD: "pwd" is a password only in a name like
// MYSQL_PWD) are not.
func TestRememberEnvSecrets(t *testing.T) {
	key, token, userKey, auth, pass := "k3y-"+t.Name(), "t0ken-"+t.Name(), "AQD-"+t.Name(), "user:pw-"+t.Name(), "luks-"+t.Name()
	activities.RememberEnvSecrets([]string{"TEMPORAL_API_KEY=" + key, "DROVER_E2E_API_TOKEN=" + token, "DROVER_EAST_CSI_userKey=" + userKey,
		"NOMAD_HTTP_AUTH=" + auth, "DROVER_EAST_CSI_encryptionPassphrase=" + pass,
		"TEMPORAL_NAMESPACE=orders-prod", "TEMPORAL_TLS_CLIENT_KEY_PATH=/etc/drover/client.key", "DROVER_TRUSTED_PLAN_KEYS=/etc/drover/plans.pub",
		"NOMAD_SECRETS_DIR=/secrets", "SIGNING_KEY_ID=ops-2026-key", "VAULT_SECRET_NAME=orders-db-creds", "FEATURE_KEY_ENABLED=disabled-for-now",
		"MONKEY_BUSINESS=no-secret-here", "SHORT_TOKEN=abc1234", "NOEQUALS",
		"PWD=/srv/drover/worker", "OLDPWD=/home/drover", "MYSQL_PWD=" + pass + "-db"})
	in := fmt.Sprintf("api %s token %s ceph %s auth %s luks %s ns orders-prod key at /etc/drover/client.key plans /etc/drover/plans.pub "+
		"in /secrets/worker.env id ops-2026-key name orders-db-creds flag disabled-for-now no-secret-here abc1234 "+
		"cwd /srv/drover/worker/hooks was /home/drover mysql %s-db", key, token, userKey, auth, pass, pass)
	want := "api [redacted] token [redacted] ceph [redacted] auth [redacted] luks [redacted] ns orders-prod key at /etc/drover/client.key plans /etc/drover/plans.pub " +
		"in /secrets/worker.env id ops-2026-key name orders-db-creds flag disabled-for-now no-secret-here abc1234 " +
		"cwd /srv/drover/worker/hooks was /home/drover mysql [redacted]"
	if got := activities.RedactResolved(in); got != want {
		t.Fatalf("redacted:\n%s\nwant:\n%s", got, want)
	}
}
