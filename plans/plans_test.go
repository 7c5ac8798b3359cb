package plans

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Sites) != 2 || len(p.VolumeGroups) == 0 {
				t.Fatalf("loaded %d sites, %d groups", len(p.Sites), len(p.VolumeGroups))
			}
			// The effective plan is itself a valid plan, and stable.
			out, err := p.YAML()
			if err != nil {
				t.Fatal(err)
			}
			again, err := Parse("effective", out)
			if err != nil {
				t.Fatalf("effective plan does not load: %v\n%s", err, out)
			}
			out2, _ := again.YAML()
			if !bytes.Equal(out, out2) {
				t.Fatalf("effective plan changed on a second load:\n%s\n---\n%s", out, out2)
			}
		})
	}
}

func TestDefaultsInOnePlace(t *testing.T) {
	p, err := Load("examples/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol := p.Policy
	if pol.Parallelism != DefaultParallelism || pol.RPOTarget.D() != DefaultRPOTarget || pol.OnFailure != "pause" ||
		pol.Retry.InitialInterval.D() != time.Second || pol.Retry.BackoffCoefficient != 2 || pol.StopDeadline.D() != 30*time.Second {
		t.Fatalf("policy defaults: %+v", pol)
	}
	if p.Deadline("PromoteVolume") != 3*time.Minute || p.Deadline("Probe") != 30*time.Second {
		t.Fatalf("deadlines: promote %v probe %v", p.Deadline("PromoteVolume"), p.Deadline("Probe"))
	}
	if e := p.Sites[0].Orchestrator.Exec; e.Shell != "/bin/sh" || e.Timeout.D() != 5*time.Minute {
		t.Fatalf("exec defaults: %+v", e)
	}
	n, err := Load("examples/nomad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n.Policy.Parallelism != 20 || n.Deadline("PromoteVolume") != 5*time.Minute || n.Deadline("DemoteVolume") != 2*time.Minute {
		t.Fatal("explicit values were overridden by defaults")
	}
	if n.Workloads[0].Sites["east"].Nomad.Stop != "deregister" || n.Workloads[0].HealthTimeout.D() != 3*time.Minute || n.Workloads[1].HealthTimeout.D() != DefaultHealthTimeout {
		t.Fatal("workload defaults")
	}
}

// base is a valid plan that the cases below break one way or another.
const base = `apiVersion: drover.dev/v1alpha1
kind: FailoverPlan
metadata:
  name: shop
sites:
  - name: east
    storage:
      endpoint: unix:///run/east.sock
    fence:
      cidrs: [10.0.0.0/24]
    orchestrator:
      nomad: {address: "http://127.0.0.1:4646"}
  - name: west
    storage:
      endpoint: 127.0.0.1:9070
    fence:
      cidrs: [10.1.0.0/24]
    orchestrator:
      nomad: {}
volumeGroups:
  - name: db
    sites:
      east: {groupID: vg-db}
      west: {groupID: vg-db}
workloads:
  - name: pg
    volumeGroups: [db]
    sites:
      east: {nomad: {job: pg}}
      west: {nomad: {job: pg}}
`

func TestBaseIsValid(t *testing.T) {
	if _, err := Parse("plan.yaml", []byte(base)); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidPlans(t *testing.T) {
	cases := []struct {
		name string
		old  string // replaced in base by new
		new  string
		want []string // every error, in order
	}{
		{"members without a storage group", "      west: {groupID: vg-db}", "      west: {volumes: [v1], members: [v1, v1]}", []string{
			`plan.yaml:24:29: volumeGroups[0].sites.west.members: members name a storage group's volumes: give them with groupID (loose volumes are listed under volumes)`,
			`plan.yaml:24:43: volumeGroups[0].sites.west.members[1]: member "v1" is empty or listed twice`}},
		{"bad CIDR", "cidrs: [10.1.0.0/24]", "cidrs: [10.1.0.0/24, 10.0.0/24]",
			[]string{`plan.yaml:17:28: sites[1].fence.cidrs[1]: "10.0.0/24" is not a CIDR`}},
		{"unknown key with a suggestion", "    fence:\n      cidrs: [10.0.0.0/24]", "    fense:\n      cidrs: [10.0.0.0/24]",
			[]string{`plan.yaml:9:5: sites[0].fense: unknown key "fense" (did you mean "fence"?)`}},
		{"invalid name", "name: shop", "name: Shop_1", []string{
			`plan.yaml:4:9: metadata.name: "Shop_1" is not a valid name: use lower-case letters, digits and dashes, at most 63`}},
		{"wrong types", "  - name: db\n", "  - name: db\n    priority: high\n", []string{
			`plan.yaml:22:15: volumeGroups[0].priority: "high" is not an integer`}},
		{"one site", "  - name: west\n    storage:\n      endpoint: 127.0.0.1:9070\n    fence:\n      cidrs: [10.1.0.0/24]\n    orchestrator:\n      nomad: {}\n", "", []string{
			`plan.yaml:5:1: sites: a plan has exactly two sites, this one has 1`}},
		{"duplicate site", "  - name: west", "  - name: east", []string{
			`plan.yaml:13:11: sites[1].name: site "east" is already defined at sites[0]`,
			`plan.yaml:24:7: volumeGroups[0].sites.west: unknown site "west" (sites are east and east)`,
			`plan.yaml:30:7: workloads[0].sites.west: unknown site "west" (sites are east and east)`}},
		{"duplicate volume group", "volumeGroups:\n  - name: db\n", "volumeGroups:\n  - name: db\n    sites:\n      east: {groupID: vg-other}\n      west: {groupID: vg-other}\n  - name: db\n", []string{
			`plan.yaml:25:11: volumeGroups[1].name: volume group "db" is already defined at volumeGroups[0]`}},
		{"invalid group name", "  - name: db\n    sites:", "  - name: DB_1\n    sites:", []string{
			`plan.yaml:21:11: volumeGroups[0].name: "DB_1" is not a valid name`,
			`plan.yaml:27:20: workloads[0].volumeGroups[0]: no volume group is named "db"`}},
		{"bad stop mode", "east: {nomad: {job: pg}}", "east: {nomad: {job: pg, stop: drain}}", []string{
			`plan.yaml:29:37: workloads[0].sites.east.nomad.stop: "drain" is not deregister or scale`}},
		{"nomad job on an exec site", "    orchestrator:\n      nomad: {}\n", "    orchestrator:\n      exec: {}\n", []string{
			`plan.yaml:30:14: workloads[0].sites.west.nomad: site "west" runs exec hooks, not Nomad`}},
		{"exit code bounds", "east: {nomad: {job: pg}}", "east: {exec: {start: a, stop: b, retryExitCodes: [1, 255, 256, 0]}}", []string{
			`plan.yaml:29:14: workloads[0].sites.east.exec: site "east" runs Nomad, not exec hooks`,
			`plan.yaml:29:65: workloads[0].sites.east.exec.retryExitCodes[2]: exit code 256 is not in 1..255`,
			`plan.yaml:29:70: workloads[0].sites.east.exec.retryExitCodes[3]: exit code 0 is not in 1..255`}},
		{"retry intervals", "workloads:", "policy:\n  retry: {initialInterval: 10s, maximumInterval: 5s, backoffCoefficient: 0.5}\nworkloads:", []string{
			`plan.yaml:26:50: policy.retry.maximumInterval: 5s is below initialInterval 10s`,
			`plan.yaml:26:74: policy.retry.backoffCoefficient: 0.5 is below 1`}},
		{"group missing on a site", "      west: {groupID: vg-db}\n", "", []string{
			`plan.yaml:22:5: volumeGroups[0].sites: site "west" is missing`}},
		{"dangling reference", "volumeGroups: [db]", "volumeGroups: [db, logs]", []string{
			`plan.yaml:27:24: workloads[0].volumeGroups[1]: no volume group is named "logs"`}},
		{"bad endpoint and bad duration", "endpoint: 127.0.0.1:9070", "endpoint: http://x:1", []string{
			`plan.yaml:15:17: sites[1].storage.endpoint: "http://x:1": use unix:///path or host:port`}},
		{"policy", "workloads:", "policy:\n  rpoTarget: 5 minutes\n  onFailure: retry\n  approvals: [beforeLunch]\n  deadlines: {Promote: 1m}\nworkloads:", []string{
			`plan.yaml:26:14: policy.rpoTarget: "5 minutes" is not a duration (e.g. 30s, 5m, 1h30m, 2d)`,
			`plan.yaml:27:14: policy.onFailure: "retry" is not pause or abort`,
			`plan.yaml:28:15: policy.approvals[0]: unknown gate "beforeLunch" (one of beforeFence, beforePromote, beforeStart, beforeDemote)`,
			`plan.yaml:29:15: policy.deadlines.Promote: unknown RPC "Promote" (one of default, GetIdentity, GetCapabilities, Probe, FenceClusterNetwork, UnfenceClusterNetwork, ListClusterFence, GetFenceClients, EnableVolumeReplication, DisableVolumeReplication, PromoteVolume, DemoteVolume, ResyncVolume, GetVolumeReplicationInfo, CreateSnapshot, DeleteSnapshot, CreateVolume, DeleteVolume, CreateVolumeGroupSnapshot, DeleteVolumeGroupSnapshot)`}},
		{"missing required keys", "kind: FailoverPlan\n", "", []string{
			`plan.yaml:1:1: kind: required key is missing`}},
		{"orchestrator mismatch", "east: {nomad: {job: pg}}", "east: {exec: {start: a, stop: b}}", []string{
			`plan.yaml:29:14: workloads[0].sites.east.exec: site "east" runs Nomad, not exec hooks`}},
		{"exit codes", "east: {nomad: {job: pg}}", "east: {exec: {start: a, stop: b, retryExitCodes: [75, 0]}}", []string{
			`plan.yaml:29:14: workloads[0].sites.east.exec: site "east" runs Nomad, not exec hooks`,
			`plan.yaml:29:61: workloads[0].sites.east.exec.retryExitCodes[1]: exit code 0 is not in 1..255`}},
		{"hook environment", "east: {nomad: {job: pg}}", "east: {exec: {start: a, stop: b, env: {DROVER_SITE: x, 1X: y, PW: z}, secretEnv: {PW: {env: A, key: p}, TOKEN: {key: t}}}}", []string{
			`plan.yaml:29:14: workloads[0].sites.east.exec: site "east" runs Nomad, not exec hooks`,
			`plan.yaml:29:46: workloads[0].sites.east.exec.env.DROVER_SITE: DROVER_SITE is set by Drover for every hook`,
			`plan.yaml:29:62: workloads[0].sites.east.exec.env.1X: "1X" is not an environment variable name (letters, digits and _, not starting with a digit)`,
			`plan.yaml:29:89: workloads[0].sites.east.exec.secretEnv.PW: PW is also in env; give it once`,
			`plan.yaml:29:111: workloads[0].sites.east.exec.secretEnv.TOKEN: give one of env or file`}},
		{"duplicate key", "kind: FailoverPlan\n", "kind: FailoverPlan\nkind: FailoverPlan\n", []string{
			`plan.yaml:3:1: kind: duplicate key "kind"`}},
		{"yaml syntax", "metadata:\n  name: shop", "metadata:\n name: shop\n  x: [", []string{
			`plan.yaml:5:1: YAML syntax: mapping values are not allowed in this context`}},
		{"syntax error after the first document", "kind: FailoverPlan\n", "kind: FailoverPlan\n---\n]\n", []string{
			`plan.yaml:3:1: YAML syntax: did not find expected node content`}},
		{"not UTF-8", "name: shop", "name: sh\xffop", []string{
			`plan.yaml:4:11: the file is not UTF-8 text: byte 0xff here starts no UTF-8 character; save the plan as UTF-8`}},
		{"requireFencing is gone", "workloads:", "policy:\n  requireFencing: false\nworkloads:", []string{
			`plan.yaml:26:3: policy.requireFencing: unknown key "requireFencing" (a failover always fences the lost site; for a site that cannot be fenced, set its fence.unavailable: true)`}},
		{"points in time without how many or how long", "workloads:", "policy:\n  pointsInTime: {every: 15m}\nworkloads:", []string{
			`plan.yaml:23:7: volumeGroups[0].sites.east: storage group "vg-db" needs its volumes listed under members for points in time (a group snapshot of them)`,
			`plan.yaml:24:7: volumeGroups[0].sites.west: storage group "vg-db" needs its volumes listed under members for points in time (a group snapshot of them)`,
			`plan.yaml:26:3: policy.pointsInTime: say how many points to keep (keep: N) or for how long (keepFor: 7d), or both`}},
		{"points in time out of range", "workloads:", "policy:\n  pointsInTime: {every: 500ms, keep: 0, keepFor: -1h}\nworkloads:", []string{
			`plan.yaml:23:7: volumeGroups[0].sites.east: storage group "vg-db" needs its volumes listed under members for points in time (a group snapshot of them)`,
			`plan.yaml:24:7: volumeGroups[0].sites.west: storage group "vg-db" needs its volumes listed under members for points in time (a group snapshot of them)`,
			`plan.yaml:26:3: policy.pointsInTime: say how many points to keep (keep: N) or for how long (keepFor: 7d), or both`,
			`plan.yaml:26:25: policy.pointsInTime.every: every 500ms is too short: points are cut at most once a second (e.g. every: 15m)`,
			`plan.yaml:26:38: policy.pointsInTime.keep: keep 0 keeps no point: give 1 or more, or leave it out and give keepFor`,
			`plan.yaml:26:50: policy.pointsInTime.keepFor: "-1h" is negative`}},
		{"points pruned before the next", "workloads:", "policy:\n  pointsInTime: {every: 1h, keepFor: 30m}\nworkloads:", []string{
			`plan.yaml:23:7: volumeGroups[0].sites.east: storage group "vg-db" needs its volumes listed under members for points in time (a group snapshot of them)`,
			`plan.yaml:24:7: volumeGroups[0].sites.west: storage group "vg-db" needs its volumes listed under members for points in time (a group snapshot of them)`,
			`plan.yaml:26:38: policy.pointsInTime.keepFor: keepFor 30m0s is shorter than every 1h0m0s: each point would be pruned before the next is cut`}},
		{"drills that ask for nothing", "workloads:", "policy:\n  drills: {}\nworkloads:", []string{
			`plan.yaml:26:3: policy.drills: say how often a drill (drill: 168h), a test recovery (testRecovery: 2160h) or both must succeed`}},
		{"drills too often", "workloads:", "policy:\n  drills: {drill: 10s, testRecovery: -1h}\nworkloads:", []string{
			`plan.yaml:26:19: policy.drills.drill: 10s is too short: at least 1m0s (e.g. drill: 168h)`,
			`plan.yaml:26:38: policy.drills.testRecovery: "-1h" is negative`}},
		{"decoding and semantic errors together", "      cidrs: [10.0.0.0/24]", "      cidrs: 10.0.0.0/24", []string{
			`plan.yaml:10:14: sites[0].fence.cidrs: want a list, got "10.0.0.0/24"`,
			`plan.yaml:12:24: sites[0].orchestrator.nomad.address: "http://127.0.0.1:4646x" is not an http(s) URL`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := base
			if tc.name == "decoding and semantic errors together" {
				src = strings.Replace(src, `4646"}`, `4646x"}`, 1)
			}
			if !strings.Contains(src, tc.old) {
				t.Fatalf("base has no %q", tc.old)
			}
			src = strings.Replace(src, tc.old, tc.new, 1)
			_, err := Parse("plan.yaml", []byte(src))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want Errors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestValidBoundaries: the values at the edge of each range are valid:
// exit codes 1 and 255, a back-off coefficient of 1, a maximum interval
// equal to the initial one, a task-group count of 0 to scale from.
func TestValidBoundaries(t *testing.T) {
	src := strings.Replace(base, "workloads:", "policy:\n  retry: {initialInterval: 5s, maximumInterval: 5s, backoffCoefficient: 1}\nworkloads:", 1)
	src = strings.Replace(src, "east: {nomad: {job: pg}}", "east: {nomad: {job: pg, stop: scale, groups: {db: 0}}}", 1)
	if _, err := Parse("plan.yaml", []byte(src)); err != nil {
		t.Fatal(err)
	}
	exec := strings.Replace(base, "      nomad: {address: \"http://127.0.0.1:4646\"}", "      exec: {}", 1)
	exec = strings.Replace(exec, "east: {nomad: {job: pg}}", "east: {exec: {start: a, stop: b, retryExitCodes: [1, 255]}}", 1)
	if exec == base {
		t.Fatal("the exec variant did not apply")
	}
	if _, err := Parse("plan.yaml", []byte(exec)); err != nil {
		t.Fatal(err)
	}
	// Points in time: every second at most, kept as long as they are
	// cut apart, by count alone, and a storage group with its members.
	pit := strings.Replace(base, "workloads:", "policy:\n  pointsInTime: {every: 1s, keep: 1, keepFor: 1s}\nworkloads:", 1)
	pit = strings.ReplaceAll(pit, "{groupID: vg-db}", "{groupID: vg-db, members: [db-1, db-2]}")
	p, err := Parse("plan.yaml", []byte(pit))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Policy.PointsInTime; got == nil || got.Every.D() != time.Second || got.Keep != 1 || got.KeepFor.D() != time.Second {
		t.Fatalf("pointsInTime read as %+v", got)
	}
	if _, err := Parse("plan.yaml", []byte(strings.Replace(pit, "keep: 1, keepFor: 1s", "keep: 48", 1))); err != nil {
		t.Fatal(err)
	}
}

func TestEmptyAndNonPlanFiles(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"", "x.yaml: the file is empty"},
		{"- a\n- b\n", `x.yaml:1:1: a plan is a mapping with apiVersion, kind, metadata, sites, volumeGroups…; got a list`},
		{base + "---\n" + base, "x.yaml:31:1: the file holds more than one YAML document; give one plan per file"},
		{"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
			"metadata: {labels: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]}\n", "x.yaml:1:1: a: unknown key"},
	} {
		_, err := Parse("x.yaml", []byte(tc.src))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
	if _, err := Load("examples/no-such-plan.yaml"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

// TestAliasExpansionIsBounded: a small file whose aliases expand to
// millions of values is refused quickly, not decoded.
func TestAliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata: {name: x}\nvolumeGroups: []\n")
	b.WriteString("policy: {approvals: &c [" + strings.Repeat("beforeFence, ", 3000) + "beforeFence]}\n")
	b.WriteString("workloads: [" + strings.Repeat("{name: w, sites: {}, volumeGroups: *c}, ", 3000) + "{name: w, sites: {}}]\n")
	b.WriteString("sites: []\n")
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "refusing to read it") {
		t.Fatalf("err = %.300v", err)
	}
	var errs Errors
	if errors.As(err, &errs); len(errs) > maxErrors+1 {
		t.Fatalf("%d errors reported", len(errs))
	}
	t.Logf("refused %d bytes in %v", b.Len(), time.Since(start))
}

func TestSchemaIsUpToDate(t *testing.T) {
	want, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("plan.schema.json")
	if err != nil {
		t.Fatalf("%v (run make schema)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("plans/plan.schema.json is stale: run make schema")
	}
	for _, k := range []string{`"additionalProperties": false`, `"const": "FailoverPlan"`, `"volumeGroups"`, `"stopDeadline"`} {
		if !bytes.Contains(want, []byte(k)) {
			t.Errorf("schema lacks %s", k)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("examples/*.yaml")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(base))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("rejection is not a list of errors: %T %v", err, err)
			}
			for _, e := range errs {
				if e.Msg == "" {
					t.Fatalf("empty message: %+v", e)
				}
			}
			return
		}
		if p == nil || len(p.Sites) != 2 {
			t.Fatalf("accepted plan without two sites")
		}
	})
}
