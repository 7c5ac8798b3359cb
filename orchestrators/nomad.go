package orchestrators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/plans"
)

// Nomad drives the Nomad cluster of one site through its HTTP API.
type Nomad struct {
	site    string
	address string
	client  *api.Client
	// namespace is the site's namespace; the client's differs for a test
	// recovery's copies (UseTestNamespace), testNamespace then.
	namespace     string
	testNamespace string
}

// NewNomad connects to a site's Nomad. NOMAD_ADDR, NOMAD_REGION,
// NOMAD_NAMESPACE, NOMAD_TOKEN and the NOMAD_* TLS variables are the
// defaults; the plan's settings win. token is the resolved ACL token ("" for
// none); it stays in the client and out of every error.
func NewNomad(site string, cfg plans.Nomad, token string) (*Nomad, error) {
	c := api.DefaultConfig()
	if cfg.Address != "" {
		c.Address = cfg.Address
	}
	if cfg.Region != "" {
		c.Region = cfg.Region
	}
	if cfg.Namespace != "" {
		c.Namespace = cfg.Namespace
	}
	if token != "" {
		c.SecretID = token
	}
	if t := cfg.TLS; t != nil {
		c.TLSConfig = &api.TLSConfig{CACert: t.CA, ClientCert: t.Cert, ClientKey: t.Key, TLSServerName: t.ServerName}
	}
	client, err := api.NewClient(c)
	if err != nil {
		return nil, fmt.Errorf("nomad client for site %q (%s): %w", site, c.Address, err)
	}
	ns := c.Namespace
	if ns == "" {
		ns = "default"
	}
	return &Nomad{site: site, address: c.Address, client: client, namespace: ns}, nil
}

func job(w Workload, op string) (*plans.NomadJob, error) {
	if w.Nomad == nil || w.Nomad.Job == "" {
		return nil, fail(op, w, false, nil, "the plan gives no Nomad job for this workload on this site")
	}
	return w.Nomad, nil
}

// info reads the job; nil without error when it does not exist.
func (n *Nomad) info(ctx context.Context, w Workload, op, id string) (*api.Job, error) {
	j, _, err := n.client.Jobs().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if isStatus(err, http.StatusNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, n.classify(op, w, err)
	}
	return j, nil
}

// StopWorkload deregisters the job without purge (so it can start again),
// or scales its task groups to zero, as the plan says. A job that is
// absent or already stopped is done.
func (n *Nomad) StopWorkload(ctx context.Context, w Workload) (string, error) {
	nj, err := job(w, "stop")
	if err != nil {
		return "", err
	}
	j, err := n.info(ctx, w, "stop", nj.Job)
	if err != nil {
		return "", err
	}
	if j == nil {
		return fmt.Sprintf("job %q is not registered: nothing to stop", nj.Job), nil
	}
	wo := (&api.WriteOptions{}).WithContext(ctx)
	if nj.Stop == "scale" {
		var done []string
		for _, tg := range j.TaskGroups {
			if tg.Count == nil || *tg.Count == 0 {
				continue
			}
			zero := 0
			if _, _, err := n.client.Jobs().Scale(nj.Job, *tg.Name, &zero, stopMessage(w), false, nil, wo); err != nil {
				return strings.Join(done, "\n"), n.classify("stop", w, err)
			}
			done = append(done, fmt.Sprintf("scaled %s.%s from %d to 0", nj.Job, *tg.Name, *tg.Count))
		}
		if len(done) == 0 {
			return fmt.Sprintf("job %q is already scaled to zero", nj.Job), nil
		}
		return strings.Join(done, "\n"), nil
	}
	if j.Stop != nil && *j.Stop {
		return fmt.Sprintf("job %q is already stopped", nj.Job), nil
	}
	eval, _, err := n.client.Jobs().Deregister(nj.Job, false, wo)
	if err != nil {
		return "", n.classify("stop", w, err)
	}
	return fmt.Sprintf("deregistered job %q (evaluation %s)", nj.Job, eval), nil
}

// stopBlock bounds one blocking query on a stopping job's allocations:
// the query returns at once when an allocation changes, else after this.
const stopBlock = 10 * time.Second

// WaitStopped waits until every allocation of the job (of any version,
// every task group) is terminal on its client: complete, failed or lost,
// as Nomad's own ClientTerminalStatus reads them. Nomad marks an
// allocation complete only once its tasks have exited, after their
// kill_timeout at most, so a terminal allocation holds no volume. It
// watches the job's allocations with blocking queries, so it sees the
// last task exit as Nomad records it, without polling. A job that is not
// registered has nothing running.
func (n *Nomad) WaitStopped(ctx context.Context, w Workload, every time.Duration, seen func(Stopped)) (Stopped, error) {
	nj, err := job(w, "stop")
	if err != nil {
		return Stopped{}, err
	}
	if every <= 0 {
		every = time.Second
	}
	last := Stopped{Detail: fmt.Sprintf("no answer from Nomad at %s yet", n.address)}
	var index uint64
	for {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: stopBlock}).WithContext(ctx)
		allocs, meta, err := n.client.Jobs().Allocations(nj.Job, true, q)
		switch {
		case ctx.Err() != nil:
			return last, ctx.Err()
		case isStatus(err, http.StatusNotFound):
			last = Stopped{Stopped: true, Detail: fmt.Sprintf("job %q is not registered: nothing runs", nj.Job)}
		case err != nil:
			e := n.classify("stop", w, err)
			if !e.Temporary {
				return last, e
			}
			last.Detail = e.Error()
			if seen != nil {
				seen(last)
			}
			index = 0
			if err := sleepCtx(ctx, every); err != nil {
				return last, err
			}
			continue
		default:
			last = stoppedOf(nj.Job, allocs)
			if meta != nil && meta.LastIndex > index {
				index = meta.LastIndex
			}
		}
		if seen != nil {
			seen(last)
		}
		if last.Stopped && isTestCopy(w) {
			return n.purgeTestCopy(ctx, w, nj, last)
		}
		if last.Stopped {
			return last, nil
		}
	}
}

// stoppedOf reads a job's allocations: stopped when every one is terminal.
func stoppedOf(jobID string, allocs []*api.AllocationListStub) Stopped {
	var running []string
	for _, a := range allocs {
		switch a.ClientStatus {
		case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		default:
			running = append(running, fmt.Sprintf("%s (%s) %s on %s, desired %s", a.Name, shortID(a.ID), a.ClientStatus, a.NodeName, a.DesiredStatus))
		}
	}
	sort.Strings(running)
	if len(running) == 0 {
		return Stopped{Stopped: true, Detail: fmt.Sprintf("all %d allocation(s) of job %q are terminal", len(allocs), jobID)}
	}
	return Stopped{Running: running, Detail: fmt.Sprintf("%d of %d allocation(s) of job %q still running: %s",
		len(running), len(allocs), jobID, strings.Join(running, "; "))}
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func stopMessage(w Workload) string {
	return fmt.Sprintf("drover: %s of plan %s stops %s on %s", w.Action, w.Plan, w.Name, w.Site)
}

// StartWorkload brings the job up: it registers the plan's job file when
// the job does not exist, re-registers a stopped job, and scales task
// groups to the plan's counts. Repeating it after a partial start (a scale
// blocked by a deployment, say) finishes the rest.
func (n *Nomad) StartWorkload(ctx context.Context, w Workload) (string, error) {
	nj, err := job(w, "start")
	if err != nil {
		return "", err
	}
	if isTestCopy(w) {
		return n.startTestCopy(ctx, w, nj)
	}
	if isRestored(w) {
		return n.startRestored(ctx, w)
	}
	j, err := n.info(ctx, w, "start", nj.Job)
	if err != nil {
		return "", err
	}
	wo := (&api.WriteOptions{}).WithContext(ctx)
	switch {
	case j == nil:
		if nj.JobFile == "" {
			return "", fail("start", w, false, nil, "job %q is not registered on this site and the plan names no jobFile to register", nj.Job)
		}
		spec, err := n.readJobFile(ctx, w, nj, "start")
		if err != nil {
			return "", err
		}
		setCounts(spec, nj.Groups)
		if _, _, err := n.client.Jobs().Register(spec, wo); err != nil {
			return "", n.classify("start", w, err)
		}
		return fmt.Sprintf("registered job %q from %s", nj.Job, nj.JobFile), nil
	case j.Stop != nil && *j.Stop:
		j.Stop = new(false)
		setCounts(j, nj.Groups)
		if _, _, err := n.client.Jobs().Register(j, wo); err != nil {
			return "", n.classify("start", w, err)
		}
		return fmt.Sprintf("re-registered stopped job %q", nj.Job), nil
	}
	var done []string
	for _, name := range sortedGroups(nj.Groups) {
		want := nj.Groups[name]
		tg := group(j, name)
		if tg == nil {
			return strings.Join(done, "\n"), fail("start", w, false, nil, "job %q has no task group %q", nj.Job, name)
		}
		if tg.Count != nil && *tg.Count == want {
			continue
		}
		if _, _, err := n.client.Jobs().Scale(nj.Job, name, &want, stopMessage(w), false, nil, wo); err != nil {
			return strings.Join(done, "\n"), n.classify("start", w, err)
		}
		done = append(done, fmt.Sprintf("scaled %s.%s to %d", nj.Job, name, want))
	}
	if len(done) == 0 {
		return fmt.Sprintf("job %q is already running as the plan wants", nj.Job), nil
	}
	return strings.Join(done, "\n"), nil
}

// readJobFile reads the plan's job file for op (start, or describe in a
// drill). Nomad parses HCL as "input.hcl": its errors are given back with
// the file's own path, so that the line and column lead to the file.
func (n *Nomad) readJobFile(ctx context.Context, w Workload, nj *plans.NomadJob, op string) (*api.Job, error) {
	data, err := os.ReadFile(nj.JobFile)
	if err != nil {
		return nil, fail(op, w, false, err, "read job file: %v", err)
	}
	text := strings.TrimSpace(string(data))
	var spec *api.Job
	if strings.HasPrefix(text, "{") {
		// The API's JSON: {"Job": {...}} as `nomad job run -output` writes
		// it, or the job object itself.
		var wrapped struct{ Job *api.Job }
		if err := json.Unmarshal(data, &wrapped); err == nil && wrapped.Job != nil {
			spec = wrapped.Job
		} else if err := json.Unmarshal(data, &spec); err != nil {
			return nil, fail(op, w, false, err, "job file %s: not a Nomad JSON job: %v", nj.JobFile, err)
		}
	} else {
		spec, err = n.client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(data), Canonicalize: true})
		var ure api.UnexpectedResponseError
		if errors.As(err, &ure) && ure.HasStatusCode() && ure.StatusCode() == http.StatusBadRequest {
			body := strings.TrimSpace(ure.Body())
			body = strings.TrimPrefix(body, "Failed to parse job: ")
			body = strings.ReplaceAll(body, "input.hcl:", nj.JobFile+":")
			if !strings.HasPrefix(body, nj.JobFile+":") {
				body = nj.JobFile + ": " + body
			}
			return nil, fail(op, w, false, err, "job file %s", body)
		}
		if err != nil {
			return nil, n.classify(op, w, fmt.Errorf("parse job file %s: %w", nj.JobFile, err))
		}
	}
	if spec.ID == nil || *spec.ID != nj.Job {
		got := ""
		if spec.ID != nil {
			got = *spec.ID
		}
		return nil, fail(op, w, false, nil, "job file %s defines job %q, the plan wants %q", nj.JobFile, got, nj.Job)
	}
	return spec, nil
}

func setCounts(j *api.Job, counts map[string]int) {
	for _, tg := range j.TaskGroups {
		if c, ok := counts[*tg.Name]; ok {
			tg.Count = new(c)
		}
	}
}

func group(j *api.Job, name string) *api.TaskGroup {
	for _, tg := range j.TaskGroups {
		if tg.Name != nil && *tg.Name == name {
			return tg
		}
	}
	return nil
}

func sortedGroups(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// CheckHealth looks at the job's allocations and its latest deployment:
// healthy when every wanted allocation runs and the deployment of the
// current version (if the job has one) succeeded. A failed or cancelled
// deployment, or a stopped or missing job, will not heal by waiting.
func (n *Nomad) CheckHealth(ctx context.Context, w Workload) (Health, error) {
	nj, err := job(w, "health")
	if err != nil {
		return Health{}, err
	}
	j, err := n.info(ctx, w, "health", nj.Job)
	if err != nil {
		return Health{}, err
	}
	if j == nil {
		return Health{Failed: true, Detail: fmt.Sprintf("job %q is not registered", nj.Job)}, nil
	}
	if j.Stop != nil && *j.Stop {
		return Health{Failed: true, Detail: fmt.Sprintf("job %q is stopped", nj.Job)}, nil
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	// The deployment first: Nomad fails a deployment only after the
	// client reported the failed allocation, so allocations read after it
	// name every allocation that failed it.
	d, _, err := n.client.Jobs().LatestDeployment(nj.Job, q)
	if err != nil {
		return Health{}, n.classify("health", w, err)
	}
	allocs, _, err := n.client.Jobs().Allocations(nj.Job, false, q)
	if err != nil {
		return Health{}, n.classify("health", w, err)
	}
	wanted := 0
	for _, tg := range j.TaskGroups {
		if tg.Count != nil {
			wanted += *tg.Count
		}
	}
	running := 0
	var failing []string
	for _, a := range allocs {
		if a.DesiredStatus != "run" {
			continue
		}
		switch a.ClientStatus {
		case "running":
			running++
		case "failed", "lost":
			failing = append(failing, allocProblem(a))
		}
	}
	h := Health{Failing: failing}
	parts := []string{fmt.Sprintf("%d/%d allocations running", running, wanted)}
	deployOK := true
	if d != nil && j.Version != nil && d.JobVersion == *j.Version {
		parts = append(parts, "deployment "+d.Status)
		switch d.Status {
		case "successful":
		case "failed", "cancelled":
			deployOK = false
			h.Failed = true
			parts[len(parts)-1] += ": " + d.StatusDescription
		default:
			deployOK = false
		}
	}
	if len(failing) > 0 {
		parts = append(parts, fmt.Sprintf("%d failed: %s", len(failing), strings.Join(failing, "; ")))
	}
	h.Healthy = wanted > 0 && running >= wanted && deployOK && !h.Failed
	h.Detail = strings.Join(parts, "; ")
	return h, nil
}

func allocProblem(a *api.AllocationListStub) string {
	why := a.ClientDescription
	for _, ts := range a.TaskStates {
		for _, ev := range ts.Events {
			if ev.DisplayMessage != "" {
				why = ev.DisplayMessage
			}
		}
	}
	return fmt.Sprintf("%s (%s) %s: %s", a.Name, shortID(a.ID), a.ClientStatus, why)
}

// DescribeWorkload reports the job and the CSI volumes its task groups
// claim, with whether each is registered on this site; a job started on
// restored volumes (plans.NomadJob.Restore) claims those. A missing job
// is described from the plan's job file when there is one.
func (n *Nomad) DescribeWorkload(ctx context.Context, w Workload) (Description, error) {
	nj, err := job(w, "describe")
	if err != nil {
		return Description{}, err
	}
	j, err := n.info(ctx, w, "describe", nj.Job)
	if err != nil {
		return Description{}, err
	}
	d := Description{Exists: j != nil}
	if j == nil {
		if nj.JobFile == "" {
			d.Detail = fmt.Sprintf("job %q is not registered and the plan names no jobFile", nj.Job)
			return d, nil
		}
		if j, err = n.readJobFile(ctx, w, nj, "describe"); err != nil {
			return d, err
		}
		d.Detail = fmt.Sprintf("job %q is not registered; start registers it from %s", nj.Job, nj.JobFile)
	} else {
		d.Status = deref(j.Status)
		if j.Stop != nil && *j.Stop {
			d.Status = "stopped"
		}
	}
	d.Groups = map[string]int{}
	claims := map[string]bool{}
	for _, tg := range j.TaskGroups {
		if tg.Count != nil {
			d.Groups[*tg.Name] = *tg.Count
		}
		for _, v := range tg.Volumes {
			if v != nil && v.Type == "csi" && v.Source != "" {
				src := v.Source
				if to, ok := restoredSource(nj, src); ok {
					// Started on the restored volumes, it claims those.
					src = to
				}
				claims[src] = true
			}
		}
	}
	if len(claims) == 0 {
		return d, nil
	}
	vols, _, err := n.client.CSIVolumes().List((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return d, n.classify("describe", w, err)
	}
	byID := map[string]*api.CSIVolumeListStub{}
	for _, v := range vols {
		byID[v.ID] = v
	}
	for _, id := range sortedKeys(claims) {
		v := Volume{ID: id}
		if s, ok := byID[id]; ok {
			v.Registered, v.ExternalID, v.PluginID, v.Schedulable = true, s.ExternalID, s.PluginID, s.Schedulable
		}
		d.Volumes = append(d.Volumes, v)
	}
	return d, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func isStatus(err error, code int) bool {
	var ure api.UnexpectedResponseError
	return errors.As(err, &ure) && ure.StatusCode() == code
}

// classify turns a Nomad API error into an *Error: unreachable, throttled
// or failing servers and a scale blocked by a running deployment are
// temporary; a refused token and other client errors are not.
func (n *Nomad) classify(op string, w Workload, err error) *Error {
	var ure api.UnexpectedResponseError
	if !errors.As(err, &ure) || !ure.HasStatusCode() {
		if errors.Is(err, context.Canceled) {
			return fail(op, w, false, err, "cancelled")
		}
		return fail(op, w, true, err, "Nomad at %s is unreachable: %v", n.address, err)
	}
	body := strings.TrimSpace(ure.Body())
	switch code := ure.StatusCode(); {
	case code == http.StatusBadRequest && strings.Contains(body, "blocked due to active deployment"):
		return fail(op, w, true, err, "scaling is blocked while the job's deployment runs; retrying after it ends")
	case code == http.StatusForbidden:
		return fail(op, w, false, err, "Nomad refused the request (403 %s): check the site's ACL token and its policy", body)
	case code == http.StatusTooManyRequests || code >= 500:
		return fail(op, w, true, err, "Nomad answered %d: %s", code, body)
	default:
		return fail(op, w, false, err, "Nomad answered %d: %s", code, body)
	}
}
