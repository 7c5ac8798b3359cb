// Package nomadfake is an in-process stand-in for the Nomad HTTP API, for
// tests where no Nomad agent can run. It serves the real payload shapes
// (the api package's own types) for the endpoints Drover uses, and models
// what a real agent does over time:
//
//   - a registered service job places allocations that are pending, then
//     running; each job version gets a deployment that turns successful
//     once every allocation has been healthy for a while, or failed when
//     one fails;
//   - scaling while a deployment runs answers HTTP 400 "job scaling
//     blocked due to active deployment", as Nomad does;
//   - deregistering (without purge) leaves the job queryable, stopped and
//     "dead"; a stopping allocation keeps running (desired "stop") for
//     StopDelay, as a task does through its kill_timeout, then turns
//     complete, its tasks "dead" with the time they finished;
//   - the job allocations endpoint answers blocking queries (index, wait)
//     as Nomad does: it holds the request until an allocation of the job
//     changes, including one that finishes stopping;
//   - a task whose command is false fails, as it does on a real client;
//   - ACL tokens, namespaces, blocking-query headers and CSI volumes.
package nomadfake

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Server is a fake Nomad agent.
type Server struct {
	// URL is the agent's address, http://127.0.0.1:port.
	URL string
	// Token, when set, is the only ACL token accepted.
	Token string
	// StartDelay is how long a new allocation stays pending.
	StartDelay time.Duration
	// HealthyAfter is how long allocations must run before their
	// deployment succeeds, for jobs whose update block sets no
	// min_healthy_time.
	HealthyAfter time.Duration
	// StopDelay is how long a stopping allocation takes to complete.
	StopDelay time.Duration

	mu      sync.Mutex
	srv     *httptest.Server
	index   uint64
	seq     int
	jobs    map[string]*job
	volumes []*api.CSIVolumeListStub
	// volExtra holds what a volume's stub lacks (csi.go), and plugins
	// the CSI controllers by plugin id.
	volExtra map[string]*api.CSIVolume
	plugins  map[string]string
	failing  map[string]string // namespace/job/group → why its allocations fail
	calls    []string
}

type job struct {
	spec        *api.Job
	allocs      []*alloc
	deployments []*deployment
	// seen is the allocations' state at allocIndex, the index at which
	// it last changed: what a blocking query on them waits past.
	seen       string
	allocIndex uint64
}

type alloc struct {
	id, name, group string
	version         uint64
	created         time.Time
	stopped         time.Time
	failWhy         string
	index           uint64
}

type deployment struct {
	id        string
	version   uint64
	created   time.Time
	cancelled string
	index     uint64
}

// Start runs a fake agent on loopback until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{StartDelay: 100 * time.Millisecond, HealthyAfter: 100 * time.Millisecond, StopDelay: 50 * time.Millisecond,
		jobs: map[string]*job{}, failing: map[string]string{}, index: 10}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewUnstartedServer(s.routes())
	s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Close stops the agent: later calls find nothing listening.
func (s *Server) Close() { s.srv.Close() }

// FailGroup makes the allocations of a task group fail from now on.
func (s *Server) FailGroup(namespace, jobID, group, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[key(namespace, jobID)+"/"+group] = why
}

// AddVolume registers a CSI volume.
func (s *Server) AddVolume(v api.CSIVolumeListStub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.Namespace == "" {
		v.Namespace = "default"
	}
	s.index++
	v.CreateIndex, v.ModifyIndex = s.index, s.index
	s.volumes = append(s.volumes, &v)
}

// Calls lists the write calls received, as "METHOD path".
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// Job returns the stored job, canonicalized, or nil.
func (s *Server) Job(namespace, id string) *api.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[key(namespace, id)]; j != nil {
		return s.view(j, time.Now())
	}
	return nil
}

func key(namespace, id string) string {
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + id
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	write := func(pattern string, h func(w http.ResponseWriter, r *http.Request)) {
		for _, m := range []string{"PUT", "POST"} {
			mux.HandleFunc(m+" "+pattern, h)
		}
	}
	write("/v1/jobs", s.register)
	write("/v1/jobs/parse", s.parse)
	mux.HandleFunc("GET /v1/job/{id}", s.info)
	mux.HandleFunc("DELETE /v1/job/{id}", s.deregister)
	write("/v1/job/{id}/scale", s.scale)
	mux.HandleFunc("GET /v1/job/{id}/allocations", s.allocations)
	mux.HandleFunc("GET /v1/job/{id}/deployment", s.latestDeployment)
	mux.HandleFunc("GET /v1/volumes", s.listVolumes)
	mux.HandleFunc("GET /v1/volume/csi/{id}", s.volumeInfo)
	write("/v1/volume/csi/{id}", s.volumeRegister)
	mux.HandleFunc("DELETE /v1/volume/csi/{id}", s.volumeDeregister)
	write("/v1/volume/csi/{id}/create", s.volumeCreate)
	mux.HandleFunc("DELETE /v1/volume/csi/{id}/delete", s.volumeDelete)
	write("/v1/volumes/snapshot", s.snapshotCreate)
	mux.HandleFunc("DELETE /v1/volumes/snapshot", s.snapshotDelete)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Token != "" && r.Header.Get("X-Nomad-Token") != s.Token {
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet {
			s.mu.Lock()
			s.calls = append(s.calls, r.Method+" "+r.URL.Path)
			s.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	})
}

// reply writes v as JSON with the headers of a blocking query, which the
// api client requires.
func (s *Server) reply(w http.ResponseWriter, v any) {
	s.mu.Lock()
	idx := s.index
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	w.Header().Set("X-Nomad-KnownLeader", "true")
	w.Header().Set("X-Nomad-LastContact", "0")
	_ = json.NewEncoder(w).Encode(v)
}

func namespaceOf(r *http.Request) string {
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		return ns
	}
	return "default"
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req api.JobRegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job == nil || req.Job.ID == nil || *req.Job.ID == "" {
		http.Error(w, "1 error occurred:\n\t* Missing job ID\n", http.StatusBadRequest)
		return
	}
	spec := req.Job
	if spec.Namespace == nil || *spec.Namespace == "" {
		spec.Namespace = ptr(namespaceOf(r))
	}
	for _, tg := range spec.TaskGroups {
		if tg.Name == nil || *tg.Name == "" {
			http.Error(w, "1 error occurred:\n\t* Missing task group name\n", http.StatusBadRequest)
			return
		}
		if tg.Count == nil {
			tg.Count = ptr(1)
		}
	}
	if spec.Type == nil {
		spec.Type = ptr("service")
	}
	if spec.Stop == nil {
		spec.Stop = ptr(false)
	}
	s.mu.Lock()
	resp := s.apply(key(*spec.Namespace, *spec.ID), spec, time.Now())
	s.mu.Unlock()
	s.reply(w, resp)
}

// apply stores a new version of a job and reconciles its allocations.
func (s *Server) apply(k string, spec *api.Job, now time.Time) api.JobRegisterResponse {
	s.index++
	j := s.jobs[k]
	version := uint64(0)
	if j == nil {
		j = &job{}
		s.jobs[k] = j
		spec.CreateIndex = ptr(s.index)
	} else {
		version = *j.spec.Version + 1
		spec.CreateIndex = j.spec.CreateIndex
	}
	spec.Version = ptr(version)
	spec.JobModifyIndex = ptr(s.index)
	spec.ModifyIndex = ptr(s.index)
	j.spec = spec
	for _, d := range j.deployments {
		if d.cancelled == "" && s.deploymentStatus(j, d, now) == "running" {
			d.cancelled = "Cancelled due to newer version of job"
		}
	}
	for _, tg := range spec.TaskGroups {
		want := *tg.Count
		if *spec.Stop {
			want = 0
		}
		var live []*alloc
		for _, a := range j.allocs {
			if a.group == *tg.Name && a.stopped.IsZero() && s.clientStatus(j, a, now) != "failed" {
				live = append(live, a)
			}
		}
		for i, a := range live {
			if i < want {
				a.version = version // in-place update
			} else {
				a.stopped = now
			}
		}
		for i := len(live); i < want; i++ {
			s.seq++
			j.allocs = append(j.allocs, &alloc{id: fmt.Sprintf("%08x-0000-4000-8000-%012x", s.seq, s.seq),
				name: fmt.Sprintf("%s.%s[%d]", *spec.ID, *tg.Name, i), group: *tg.Name, version: version, created: now,
				failWhy: s.failWhy(k, tg), index: s.index})
		}
	}
	if *spec.Type == "service" && !*spec.Stop {
		s.seq++
		j.deployments = append(j.deployments, &deployment{id: fmt.Sprintf("d%07x-0000-4000-8000-%012x", s.seq, s.seq), version: version, created: now, index: s.index})
	}
	return api.JobRegisterResponse{EvalID: s.evalID(), EvalCreateIndex: s.index, JobModifyIndex: s.index}
}

// failWhy says why the allocations of a group will fail: FailGroup, or a
// raw_exec/exec task whose command is false, which exits 1 on a real
// client too.
func (s *Server) failWhy(k string, tg *api.TaskGroup) string {
	if why := s.failing[k+"/"+*tg.Name]; why != "" {
		return why
	}
	if ns, _, _ := strings.Cut(k, "/"); s.missingVolume(ns, tg) != "" {
		return fmt.Sprintf("Constraint \"missing CSI Volume %s\" filtered 1 node", s.missingVolume(ns, tg))
	}
	for _, t := range tg.Tasks {
		if cmd, _ := t.Config["command"].(string); cmd == "false" || cmd == "/bin/false" || cmd == "/usr/bin/false" {
			return fmt.Sprintf("task %q exited with exit code 1", t.Name)
		}
	}
	return ""
}

func (s *Server) evalID() string {
	s.seq++
	return fmt.Sprintf("e%07x-0000-4000-8000-%012x", s.seq, s.seq)
}

func (s *Server) clientStatus(j *job, a *alloc, now time.Time) string {
	switch {
	case !a.stopped.IsZero() && now.Sub(a.stopped) >= s.StopDelay:
		return "complete"
	case now.Sub(a.created) < s.StartDelay:
		return "pending"
	case a.failWhy != "":
		return "failed"
	default:
		return "running"
	}
}

func (s *Server) deploymentStatus(j *job, d *deployment, now time.Time) string {
	if d.cancelled != "" {
		return "cancelled"
	}
	healthy, failed := 0, 0
	for _, a := range j.allocs {
		if a.version != d.version || !a.stopped.IsZero() {
			continue
		}
		switch s.clientStatus(j, a, now) {
		case "failed":
			failed++
		case "running":
			if now.Sub(a.created) >= s.StartDelay+s.healthyAfter(j) {
				healthy++
			}
		}
	}
	switch {
	case failed > 0:
		return "failed"
	case healthy >= s.desired(j):
		return "successful"
	default:
		return "running"
	}
}

// healthyAfter is how long an allocation must run before it counts as
// healthy: the job's update block's min_healthy_time, as on a real agent,
// or HealthyAfter when the job sets none.
func (s *Server) healthyAfter(j *job) time.Duration {
	if u := j.spec.Update; u != nil && u.MinHealthyTime != nil && *u.MinHealthyTime > 0 {
		return *u.MinHealthyTime
	}
	return s.HealthyAfter
}

func (s *Server) desired(j *job) int {
	n := 0
	for _, tg := range j.spec.TaskGroups {
		n += *tg.Count
	}
	return n
}

// view is the job as GET /v1/job/:id shows it, with its derived status.
func (s *Server) view(j *job, now time.Time) *api.Job {
	out := *j.spec
	status := "pending"
	running, terminal := 0, 0
	for _, a := range j.allocs {
		switch s.clientStatus(j, a, now) {
		case "running":
			running++
		case "complete", "failed":
			terminal++
		}
	}
	switch {
	case *j.spec.Stop && running == 0:
		status = "dead"
	case running > 0 || (terminal > 0 && terminal == len(j.allocs)):
		status = "running"
	}
	out.Status = ptr(status)
	return &out
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*job, string, bool) {
	k := key(namespaceOf(r), r.PathValue("id"))
	j := s.jobs[k]
	if j == nil {
		http.Error(w, "job not found", http.StatusNotFound)
		return nil, k, false
	}
	return j, k, true
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	j, _, ok := s.lookup(w, r)
	var v *api.Job
	if ok {
		v = s.view(j, time.Now())
	}
	s.mu.Unlock()
	if ok {
		s.reply(w, v)
	}
}

func (s *Server) deregister(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	j, k, ok := s.lookup(w, r)
	if !ok {
		s.mu.Unlock()
		return
	}
	var resp api.JobDeregisterResponse
	if r.URL.Query().Get("purge") == "true" {
		delete(s.jobs, k)
		s.index++
		resp = api.JobDeregisterResponse{EvalID: s.evalID(), EvalCreateIndex: s.index, JobModifyIndex: s.index}
	} else {
		spec := *j.spec
		spec.Stop = ptr(true)
		reg := s.apply(k, &spec, time.Now())
		resp = api.JobDeregisterResponse{EvalID: reg.EvalID, EvalCreateIndex: reg.EvalCreateIndex, JobModifyIndex: reg.JobModifyIndex}
	}
	s.mu.Unlock()
	s.reply(w, resp)
}

func (s *Server) scale(w http.ResponseWriter, r *http.Request) {
	var req api.ScalingRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "invalid scaling request: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	resp, code, msg := s.scaleLocked(namespaceOf(r), r.PathValue("id"), req)
	s.mu.Unlock()
	if code != 0 {
		http.Error(w, msg, code)
		return
	}
	s.reply(w, resp)
}

func (s *Server) scaleLocked(namespace, id string, req api.ScalingRequest) (api.JobRegisterResponse, int, string) {
	k := key(namespace, id)
	j := s.jobs[k]
	if j == nil {
		return api.JobRegisterResponse{}, http.StatusNotFound, "job not found"
	}
	group := req.Target["Group"]
	found := false
	for _, g := range j.spec.TaskGroups {
		found = found || *g.Name == group
	}
	if !found {
		return api.JobRegisterResponse{}, http.StatusBadRequest, fmt.Sprintf("task group %q specified for scaling does not exist in job", group)
	}
	if req.Count == nil {
		return api.JobRegisterResponse{}, http.StatusBadRequest, "scaling action count can't be nil"
	}
	now := time.Now()
	for _, d := range j.deployments {
		if s.deploymentStatus(j, d, now) == "running" {
			return api.JobRegisterResponse{}, http.StatusBadRequest, "job scaling blocked due to active deployment"
		}
	}
	spec := *j.spec
	spec.TaskGroups = make([]*api.TaskGroup, len(j.spec.TaskGroups))
	for i, g := range j.spec.TaskGroups {
		c := *g
		if *g.Name == group {
			c.Count = ptr(int(*req.Count))
		}
		spec.TaskGroups[i] = &c
	}
	return s.apply(k, &spec, now), 0, ""
}

// allocState is what a blocking query on a job's allocations sees
// change: each allocation's desired and client status. A change moves
// the job's allocation index, as a client's update does on a real agent.
func (s *Server) allocState(j *job, now time.Time) uint64 {
	var b strings.Builder
	for _, a := range j.allocs {
		fmt.Fprintf(&b, "%s/%t/%s;", a.id, a.stopped.IsZero(), s.clientStatus(j, a, now))
	}
	if st := b.String(); st != j.seen || j.allocIndex == 0 {
		s.index++
		j.seen, j.allocIndex = st, s.index
	}
	return j.allocIndex
}

// blockingQuery reads the index and wait parameters of a blocking query:
// wait defaults to 5 minutes, as on a real agent.
func blockingQuery(r *http.Request) (index uint64, wait time.Duration) {
	index, _ = strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	wait = 5 * time.Minute
	if w := r.URL.Query().Get("wait"); w != "" {
		if d, err := time.ParseDuration(w); err == nil && d > 0 {
			wait = d
		}
	}
	return index, wait
}

func (s *Server) allocations(w http.ResponseWriter, r *http.Request) {
	index, wait := blockingQuery(r)
	until := time.Now().Add(wait)
	for {
		s.mu.Lock()
		j, _, ok := s.lookup(w, r)
		if !ok {
			s.mu.Unlock()
			return
		}
		now := time.Now()
		if s.allocState(j, now) > index || !now.Before(until) || r.Context().Err() != nil {
			out := s.allocStubs(j, now)
			s.mu.Unlock()
			sort.Slice(out, func(i, k int) bool { return out[i].CreateIndex > out[k].CreateIndex })
			s.reply(w, out)
			return
		}
		s.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *Server) allocStubs(j *job, now time.Time) []*api.AllocationListStub {
	out := []*api.AllocationListStub{}
	for _, a := range j.allocs {
		st := s.clientStatus(j, a, now)
		desired := "run"
		if !a.stopped.IsZero() {
			desired = "stop"
		}
		stub := &api.AllocationListStub{ID: a.id, EvalID: s.evalID(), Name: a.name, Namespace: *j.spec.Namespace,
			NodeID: "node-0000", NodeName: "fake-client", JobID: *j.spec.ID, JobType: *j.spec.Type, JobVersion: a.version,
			TaskGroup: a.group, DesiredStatus: desired, ClientStatus: st, CreateIndex: a.index, ModifyIndex: s.index,
			CreateTime: a.created.UnixNano(), ModifyTime: now.UnixNano()}
		stub.TaskStates = s.taskStates(j, a, st)
		if st == "failed" {
			stub.ClientDescription = "Failed tasks"
		}
		if *j.spec.Type == "service" && st == "running" && now.Sub(a.created) >= s.StartDelay+s.healthyAfter(j) {
			stub.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: ptr(true)}
		}
		out = append(out, stub)
	}
	return out
}

// taskStates are the allocation's task states as a client reports them:
// pending, running since the start, killed when asked to stop, dead with
// the time the task finished.
func (s *Server) taskStates(j *job, a *alloc, status string) map[string]*api.TaskState {
	var tasks []string
	for _, tg := range j.spec.TaskGroups {
		if *tg.Name == a.group {
			for _, t := range tg.Tasks {
				tasks = append(tasks, t.Name)
			}
		}
	}
	if len(tasks) == 0 {
		tasks = []string{a.group}
	}
	started := a.created.Add(s.StartDelay)
	out := map[string]*api.TaskState{}
	for _, name := range tasks {
		ts := &api.TaskState{State: "pending"}
		switch status {
		case "running":
			ts.State, ts.StartedAt = "running", started
			ts.Events = []*api.TaskEvent{{Type: "Started", Time: started.UnixNano(), DisplayMessage: "Task started by client"}}
			if !a.stopped.IsZero() {
				ts.Events = append(ts.Events, &api.TaskEvent{Type: "Killing", Time: a.stopped.UnixNano(), DisplayMessage: "Sent interrupt"})
			}
		case "complete":
			end := a.stopped.Add(s.StopDelay)
			ts.State, ts.StartedAt, ts.FinishedAt = "dead", started, end
			ts.Events = []*api.TaskEvent{{Type: "Started", Time: started.UnixNano(), DisplayMessage: "Task started by client"},
				{Type: "Killing", Time: a.stopped.UnixNano(), DisplayMessage: "Sent interrupt"},
				{Type: "Killed", Time: end.UnixNano(), DisplayMessage: "Task successfully killed"}}
		case "failed":
			ts.State, ts.Failed, ts.StartedAt, ts.FinishedAt = "dead", true, started, started
			ts.Events = []*api.TaskEvent{{Type: "Driver Failure", Time: started.UnixNano(), DisplayMessage: a.failWhy}}
		}
		out[name] = ts
	}
	return out
}

func (s *Server) latestDeployment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	j, _, ok := s.lookup(w, r)
	var out *api.Deployment
	if ok && len(j.deployments) > 0 {
		now := time.Now()
		d := j.deployments[len(j.deployments)-1]
		status := s.deploymentStatus(j, d, now)
		out = &api.Deployment{ID: d.id, Namespace: *j.spec.Namespace, JobID: *j.spec.ID, JobVersion: d.version,
			JobModifyIndex: d.index, JobCreateIndex: *j.spec.CreateIndex, Status: status, TaskGroups: map[string]*api.DeploymentState{},
			CreateIndex: d.index, ModifyIndex: s.index, CreateTime: d.created.UnixNano(), ModifyTime: now.UnixNano()}
		out.StatusDescription = map[string]string{"running": "Deployment is running", "successful": "Deployment completed successfully",
			"failed": "Failed due to unhealthy allocations", "cancelled": d.cancelled}[status]
		for _, tg := range j.spec.TaskGroups {
			ds := &api.DeploymentState{DesiredTotal: *tg.Count}
			for _, a := range j.allocs {
				if a.group != *tg.Name || a.version != d.version || !a.stopped.IsZero() {
					continue
				}
				ds.PlacedAllocs++
				switch s.clientStatus(j, a, now) {
				case "failed":
					ds.UnhealthyAllocs++
				case "running":
					if now.Sub(a.created) >= s.StartDelay+s.healthyAfter(j) {
						ds.HealthyAllocs++
					}
				}
			}
			out.TaskGroups[*tg.Name] = ds
		}
	}
	s.mu.Unlock()
	if ok {
		s.reply(w, out)
	}
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	if t := r.URL.Query().Get("type"); t != "csi" {
		http.Error(w, fmt.Sprintf("unsupported volume type %q", t), http.StatusBadRequest)
		return
	}
	ns := namespaceOf(r)
	s.mu.Lock()
	out := []*api.CSIVolumeListStub{}
	for _, v := range s.volumes {
		if v.Namespace == ns || ns == "*" {
			out = append(out, v)
		}
	}
	s.mu.Unlock()
	s.reply(w, out)
}

func (s *Server) parse(w http.ResponseWriter, r *http.Request) {
	var req api.JobsParseRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "invalid parse request: "+err.Error(), http.StatusBadRequest)
		return
	}
	job, err := parseHCL(req.JobHCL)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.reply(w, job)
}

func ptr[T any](v T) *T { return &v }

// trimQuotes removes the quotes around an HCL string.
func trimQuotes(s string) string { return strings.Trim(s, `"`) }
