package nomadfake

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func ptrOf[T any](v T) *T { return &v }

// ServiceJob is a raw_exec service job with one task group "web" of count
// allocations running command 300 (so "/bin/sleep" runs, "/bin/false"
// fails); it deploys quickly on a real agent too.
func ServiceJob(id string, count int, command string) *api.Job {
	return &api.Job{
		ID: ptrOf(id), Name: ptrOf(id), Type: ptrOf("service"), Datacenters: []string{"*"},
		Update: &api.UpdateStrategy{MinHealthyTime: ptrOf(200 * time.Millisecond), HealthyDeadline: ptrOf(20 * time.Second),
			ProgressDeadline: ptrOf(30 * time.Second), HealthCheck: ptrOf("task_states")},
		TaskGroups: []*api.TaskGroup{{
			Name: ptrOf("web"), Count: ptrOf(count),
			RestartPolicy:    &api.RestartPolicy{Attempts: ptrOf(0), Mode: ptrOf("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptrOf(0), Unlimited: ptrOf(false)},
			Tasks: []*api.Task{{Name: "main", Driver: "raw_exec",
				Config: map[string]any{"command": command, "args": []string{"300"}}}},
		}},
	}
}

// WriteJobFile writes the job as `nomad job run -output` does, in a
// directory removed when the test ends, and returns its path.
func WriteJobFile(t testing.TB, j *api.Job) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"Job": j})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), *j.ID+".json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// SlowStopJob is a service job like ServiceJob whose task takes shutdown
// to stop: a shell that traps the kill signal (Nomad's SIGINT, or
// SIGTERM) and sleeps before it exits, with a kill_timeout well past
// that, so a real client waits for it. Give a fake agent the same
// StopDelay.
func SlowStopJob(id string, count int, shutdown time.Duration) *api.Job {
	j := ServiceJob(id, count, "/bin/sh")
	secs := int((shutdown + time.Second - 1) / time.Second)
	t := j.TaskGroups[0].Tasks[0]
	t.Config["args"] = []string{"-c", fmt.Sprintf("trap 'sleep %d; exit 0' INT TERM; while :; do sleep 1; done", secs)}
	t.KillTimeout = ptrOf(shutdown + 20*time.Second)
	return j
}
