package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/drover-dr/drover/internal/release"
)

// A worker archive's checksum as a release's SHA256SUMS gives it.
const testChecksum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func siteVars(site string, more map[string]cty.Value) map[string]cty.Value {
	v := map[string]cty.Value{
		"site": cty.StringVal(site), "version": cty.StringVal("v1.4.0"), "worker_checksum": cty.StringVal(testChecksum),
	}
	for k, val := range more {
		v[k] = val
	}
	return v
}

// renderedTask is a rendered job's one group's one task, failing the
// test otherwise.
func renderedTask(t *testing.T, job *hclBlock) *hclBlock {
	t.Helper()
	tasks := job.all("group", "task")
	if len(tasks) != 1 {
		t.Fatalf("job %v: %d tasks, want 1", job.Labels, len(tasks))
	}
	return tasks[0]
}

// jobID is the job's ID as Nomad takes it: its id attribute, else its
// label.
func jobID(job *hclBlock) string {
	if id := job.str("id"); id != "" {
		return id
	}
	return job.Labels[0]
}

// varPath is the Nomad Variable path the task's templates read.
func varPath(t *testing.T, task *hclBlock) string {
	t.Helper()
	var paths []string
	for _, tp := range task.all("template") {
		data := tp.str("data")
		if i := strings.Index(data, `nomadVar "`); i >= 0 {
			rest := data[i+len(`nomadVar "`):]
			paths = append(paths, rest[:strings.Index(rest, `"`)])
		}
	}
	if len(paths) == 0 {
		t.Fatalf("no template of the task reads a Nomad Variable")
	}
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("the task's templates read different variables: %v", paths)
		}
	}
	return paths[0]
}

// TestNomadSiteWorkerPerSite renders the site worker's job at east and at
// west, as `nomad job run -var site=...` does, and checks that the two
// are separate jobs that can run side by side: their job IDs differ and
// each reads the Nomad Variable named after its own ID (the path its
// workload identity may read, nomad/jobs/ID), it polls its own site's
// queue, and its datacenters are the site's. It needs no Nomad agent.
func TestNomadSiteWorkerPerSite(t *testing.T) {
	const file = "nomad/drover-site-worker.nomad.hcl"
	seen := map[string]string{}
	for _, site := range []string{"east", "west"} {
		job, err := renderJob(file, siteVars(site, nil))
		if err != nil {
			t.Fatal(err)
		}
		id := jobID(job)
		task := renderedTask(t, job)
		path := varPath(t, task)
		if id != "drover-site-worker-"+site || job.str("name") != id {
			t.Errorf("site %s: job ID %q, name %q; want drover-site-worker-%s for both", site, id, job.str("name"), site)
		}
		if path != "nomad/jobs/"+id {
			t.Errorf("site %s: the worker reads variable %q, want nomad/jobs/%s (its job's own)", site, path, id)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("sites %s and %s render the same job ID %q: one would replace the other", other, site, id)
		}
		if other, ok := seen[path]; ok {
			t.Errorf("sites %s and %s read the same variable %q", other, site, path)
		}
		seen[id], seen[path] = site, site
		if dcs := job.strs("datacenters"); !slices.Equal(dcs, []string{site}) {
			t.Errorf("site %s: datacenters %v by default, want [%s]", site, dcs, site)
		}
		if args := fmt.Sprint(task.all("config")[0].strs("args")); !strings.Contains(args, "--site "+site) {
			t.Errorf("site %s: the worker's args %s lack --site %s", site, args, site)
		}
		// Datacenters given are the ones used.
		job, err = renderJob(file, siteVars(site, map[string]cty.Value{"datacenters": cty.ListVal([]cty.Value{cty.StringVal(site + "-1"), cty.StringVal(site + "-2")})}))
		if err != nil {
			t.Fatal(err)
		}
		if dcs := job.strs("datacenters"); !slices.Equal(dcs, []string{site + "-1", site + "-2"}) {
			t.Errorf("site %s: datacenters %v with -var datacenters, want [%s-1 %s-2]", site, dcs, site, site)
		}
	}
}

// TestNomadCentralWorkerDatacenters: the central worker's job has no
// datacenters of its own (no ["*"], which would place it anywhere,
// perhaps only in the site it must survive): they are given, and used.
func TestNomadCentralWorkerDatacenters(t *testing.T) {
	const file = "nomad/drover-worker.nomad.hcl"
	base := map[string]cty.Value{"version": cty.StringVal("v1.4.0"), "worker_checksum": cty.StringVal(testChecksum)}
	if _, err := renderJob(file, base); err == nil || !strings.Contains(err.Error(), `"datacenters"`) {
		t.Errorf("the central worker's job renders without datacenters (%v); want them required", err)
	}
	for _, site := range []string{"east", "west"} {
		v := map[string]cty.Value{"datacenters": cty.ListVal([]cty.Value{cty.StringVal(site)})}
		for k, val := range base {
			v[k] = val
		}
		job, err := renderJob(file, v)
		if err != nil {
			t.Fatal(err)
		}
		if dcs := job.strs("datacenters"); !slices.Equal(dcs, []string{site}) || jobID(job) != "drover-worker" {
			t.Errorf("job %s in datacenters %v, want drover-worker in [%s]", jobID(job), dcs, site)
		}
		if p := varPath(t, renderedTask(t, job)); p != "nomad/jobs/drover-worker" {
			t.Errorf("the central worker reads %q, want nomad/jobs/drover-worker", p)
		}
	}
}

// TestNomadWorkerFromRelease: by default each job runs the worker from
// the release's archive for the clients' architecture, the one make
// release names (internal/release.Archive), its checksum checked before
// it starts, and only on clients of that architecture; nothing is
// assumed on the clients. A job lacking the version or the checksum is
// refused when rendered, before Nomad places anything; a binary on the
// clients is run only when named (worker_binary), with no download.
func TestNomadWorkerFromRelease(t *testing.T) {
	dcs := cty.ListVal([]cty.Value{cty.StringVal("east")})
	jobs := []struct {
		file string
		vars func(more map[string]cty.Value) map[string]cty.Value
	}{
		{"nomad/drover-site-worker.nomad.hcl", func(more map[string]cty.Value) map[string]cty.Value { return siteVars("east", more) }},
		{"nomad/drover-worker.nomad.hcl", func(more map[string]cty.Value) map[string]cty.Value {
			v := siteVars("", more)
			delete(v, "site")
			v["datacenters"] = dcs
			return v
		}},
	}
	for _, j := range jobs {
		for _, arch := range []string{"amd64", "arm64"} {
			job, err := renderJob(j.file, j.vars(map[string]cty.Value{"arch": cty.StringVal(arch)}))
			if err != nil {
				t.Fatal(err)
			}
			task := renderedTask(t, job)
			arts := task.all("artifact")
			want := "https://github.com/drover-dr/drover/releases/download/v1.4.0/" + release.Archive("worker", "v1.4.0", release.Platform{OS: "linux", Arch: arch})
			if len(arts) != 1 || arts[0].str("source") != want || arts[0].str("destination") != "local/drover" {
				t.Fatalf("%s (%s): artifacts %+v; want the release's archive %s into local/drover", j.file, arch, arts, want)
			}
			if opts := arts[0].all("options"); len(opts) != 1 || opts[0].str("checksum") != testChecksum {
				t.Errorf("%s (%s): the archive's checksum is not checked: options %+v", j.file, arch, opts)
			}
			if cmd := task.all("config")[0].str("command"); cmd != "${NOMAD_TASK_DIR}/drover/worker" {
				t.Errorf("%s (%s): the task runs %q, want the downloaded ${NOMAD_TASK_DIR}/drover/worker", j.file, arch, cmd)
			}
			cons := job.all("constraint")
			if len(cons) != 1 || cons[0].str("attribute") != "${attr.cpu.arch}" || cons[0].str("value") != arch {
				t.Errorf("%s (%s): constraints %+v; want the clients' ${attr.cpu.arch} to be %s", j.file, arch, cons, arch)
			}
		}
		// A mirror of the release.
		job, err := renderJob(j.file, j.vars(map[string]cty.Value{"worker_url": cty.StringVal("s3::https://mirror.example/w.tar.gz")}))
		if err != nil {
			t.Fatal(err)
		}
		if arts := renderedTask(t, job).all("artifact"); len(arts) != 1 || arts[0].str("source") != "s3::https://mirror.example/w.tar.gz" {
			t.Errorf("%s: with worker_url the artifacts are %+v", j.file, arts)
		}
		// Refused without what the download needs.
		for _, missing := range []string{"version", "worker_checksum"} {
			v := j.vars(nil)
			delete(v, missing)
			if _, err := renderJob(j.file, v); err == nil || !strings.Contains(err.Error(), "Invalid index") {
				t.Errorf("%s without %s: rendered (%v); want it refused", j.file, missing, err)
			}
		}
		// A binary on the clients, named: no download, no checksum needed.
		v := j.vars(map[string]cty.Value{"worker_binary": cty.StringVal("/opt/drover/worker")})
		delete(v, "version")
		delete(v, "worker_checksum")
		job, err = renderJob(j.file, v)
		if err != nil {
			t.Fatalf("%s with worker_binary: %v", j.file, err)
		}
		task := renderedTask(t, job)
		if cmd := task.all("config")[0].str("command"); cmd != "/opt/drover/worker" || len(task.all("artifact")) != 0 {
			t.Errorf("%s with worker_binary: runs %q with %d artifacts, want /opt/drover/worker and none", j.file, cmd, len(task.all("artifact")))
		}
	}
}

// TestNomadWorkerBuildsFromReleases renders the central worker's job with
// two builds given as release versions and their archives' checksums,
// as during an upgrade: one group per build, named by it, each
// downloading that release's archive, checked, and polling as that
// build (--build-id VERSION).
func TestNomadWorkerBuildsFromReleases(t *testing.T) {
	other := strings.Replace(testChecksum, "0123", "4567", 1)
	job, err := renderJob("nomad/drover-worker.nomad.hcl", map[string]cty.Value{
		"datacenters": cty.ListVal([]cty.Value{cty.StringVal("east")}),
		"builds":      cty.MapVal(map[string]cty.Value{"v1.4.0": cty.StringVal(testChecksum), "v1.5.0": cty.StringVal(other)}),
	})
	if err != nil {
		t.Fatal(err)
	}
	groups := job.all("group")
	if len(groups) != 2 {
		t.Fatalf("%d groups with two builds, want 2", len(groups))
	}
	for i, b := range []struct{ version, sum string }{{"v1.4.0", testChecksum}, {"v1.5.0", other}} {
		g := groups[i]
		task := g.all("task")[0]
		arts := task.all("artifact")
		want := "https://github.com/drover-dr/drover/releases/download/" + b.version + "/" + release.Archive("worker", b.version, release.Platform{OS: "linux", Arch: "amd64"})
		if g.Labels[0] != "worker-"+b.version || len(arts) != 1 || arts[0].str("source") != want || arts[0].all("options")[0].str("checksum") != b.sum {
			t.Errorf("group %v downloads %+v; want worker-%s from %s checked against %s", g.Labels, arts, b.version, want, b.sum)
		}
		if args := task.all("config")[0].strs("args"); !slices.Equal(args[len(args)-2:], []string{"--build-id", b.version}) {
			t.Errorf("group %v runs with %v, want --build-id %s", g.Labels, args, b.version)
		}
	}
}
