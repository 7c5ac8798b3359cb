package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// When a build makes itself the deployment's current version
// (--make-current).
const (
	makeCurrentNever        = "never"
	makeCurrentIfUnset      = "if-unset"
	makeCurrentIfUnattended = "if-unattended"
)

// deploymentOptions make the workflow worker a Worker Deployment Version
// (deployment name, build ID): Temporal then sends a pinned run's tasks
// only to workers of the build it started on (workflows.Register gives
// each workflow its behaviour). A site worker runs activities only and
// stays unversioned: an activity carries no history to replay.
func deploymentOptions(c config) worker.DeploymentOptions {
	if !c.versioning || c.site != "" {
		return worker.DeploymentOptions{}
	}
	return worker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   worker.WorkerDeploymentVersion{DeploymentName: c.deployment, BuildID: c.buildID},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
	}
}

// checkVersionNames refuses a deployment name or build ID that Temporal
// would refuse later, or that the commands naming them could not.
func checkVersionNames(deployment, buildID string) error {
	switch {
	case deployment == "":
		return errors.New("--deployment-name is empty")
	case strings.Contains(deployment, "."):
		return fmt.Errorf("--deployment-name %q: a deployment name cannot hold a \".\"", deployment)
	case buildID == "":
		return errors.New("--build-id is empty")
	case strings.ContainsAny(buildID, " \t\n/:\"'"):
		return fmt.Errorf("--build-id %q: want letters, digits, '.', '-' or '_'", buildID)
	}
	return nil
}

// registerVersion waits until Temporal knows this build as a version of
// the deployment, polling its task queue for workflows and activities (a
// version exists only once its workers have polled, and cannot be made
// current before), and then, with makeCurrent, makes it the deployment's
// current version when the deployment has none. That is the case at the
// very first start: until a deployment has a current version, a new
// workflow on a task queue only versioned workers poll waits, without an
// error, for a worker that never comes. When another build is current it
// changes nothing: a new build is made current by the operator (docs/guides/
// upgrades.md), or by takeOverUnattended once the current build has no
// worker left, never by a worker that happens to start beside it, so
// that a restarted old worker cannot take the deployment back.
func registerVersion(ctx context.Context, cl client.Client, deployment, buildID, queue string, makeCurrent bool, logger *slog.Logger) error {
	h := cl.WorkerDeploymentClient().GetHandle(deployment)
	wait := func(err error) error {
		select {
		case <-ctx.Done():
			return fmt.Errorf("build %q of deployment %q: %w", buildID, deployment, err)
		case <-time.After(300 * time.Millisecond):
			return nil
		}
	}
	for {
		v, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: buildID})
		if err == nil {
			polled := map[client.TaskQueueType]bool{}
			for _, q := range v.Info.TaskQueuesInfos {
				if q.Name == queue {
					polled[q.Type] = true
				}
			}
			if polled[client.TaskQueueTypeWorkflow] && polled[client.TaskQueueTypeActivity] {
				break
			}
			err = fmt.Errorf("its workers' polls of task queue %q have not all reached Temporal", queue)
		}
		if err := wait(err); err != nil {
			return err
		}
	}
	if !makeCurrent {
		return nil
	}
	for {
		d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if err == nil {
			cur := d.Info.RoutingConfig.CurrentVersion
			switch {
			case cur != nil && cur.BuildID == buildID:
				logger.Info("this build is the deployment's current version", "deployment", deployment, "buildID", buildID)
				return nil
			case cur != nil:
				logger.Warn("another build is the deployment's current version: this one runs only the workflows pinned to it, and new ones once it is made current",
					"deployment", deployment, "buildID", buildID, "current", cur.BuildID,
					"makeCurrent", fmt.Sprintf("temporal worker deployment set-current-version --deployment-name %s --build-id %s", deployment, buildID))
				return nil
			}
			// A conflict (another worker set it meanwhile) is seen again.
			_, err = h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID, ConflictToken: d.ConflictToken})
			if err == nil {
				logger.Info("made this build the deployment's current version: it had none", "deployment", deployment, "buildID", buildID)
				return nil
			}
		}
		if err := wait(err); err != nil {
			return err
		}
	}
}

// unattendedEvery is how often takeOverUnattended looks.
const unattendedEvery = 15 * time.Second

// takeOverUnattended makes this build the deployment's current version
// when no worker of the current build has polled the task queue for
// after: its workers were replaced by this build's (a Nomad job's rolling
// update, a container rebuilt) rather than run beside them, and until a
// build with workers is current every new workflow, Protect and the plan's
// records wait. A run pinned to the build that is gone waits for a worker
// of it all the same: upgrades that keep those safe run both builds side
// by side (docs/guides/upgrades.md). It looks every unattendedEvery until ctx
// ends.
func takeOverUnattended(ctx context.Context, cl client.Client, deployment, buildID, queue string, after time.Duration, logger *slog.Logger) {
	h := cl.WorkerDeploymentClient().GetHandle(deployment)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(unattendedEvery):
		}
		d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if err != nil {
			continue
		}
		cur := d.Info.RoutingConfig.CurrentVersion
		if cur != nil && cur.BuildID == buildID {
			continue
		}
		if cur != nil {
			last, err := lastPoll(ctx, cl, queue, deployment, cur.BuildID)
			if err != nil || time.Since(last) < after {
				continue
			}
		}
		if _, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID, ConflictToken: d.ConflictToken}); err != nil {
			logger.Warn("could not make this build the deployment's current version", "deployment", deployment, "buildID", buildID, "error", err)
			continue
		}
		gone := "none"
		if cur != nil {
			gone = cur.BuildID
		}
		logger.Warn("made this build the deployment's current version: the current one had no worker polling", "deployment", deployment,
			"buildID", buildID, "previous", gone, "unattendedFor", after)
	}
}

// lastPoll is when a worker of build last polled the task queue, for
// workflows or activities (zero if none Temporal remembers).
func lastPoll(ctx context.Context, cl client.Client, queue, deployment, build string) (time.Time, error) {
	var last time.Time
	for _, typ := range []enums.TaskQueueType{enums.TASK_QUEUE_TYPE_WORKFLOW, enums.TASK_QUEUE_TYPE_ACTIVITY} {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cl.DescribeTaskQueue(dctx, queue, typ)
		cancel()
		if err != nil {
			return last, err
		}
		for _, p := range resp.GetPollers() {
			o := p.GetDeploymentOptions()
			if o.GetDeploymentName() == deployment && o.GetBuildId() == build && p.GetLastAccessTime().AsTime().After(last) {
				last = p.GetLastAccessTime().AsTime()
			}
		}
	}
	return last, nil
}
