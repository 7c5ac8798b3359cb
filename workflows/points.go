package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// Points in time (policy.pointsInTime): Protect keeps snapshots of the
// replicas at the recovery site, the site that is not primary, so that
// a recovery can go back to before damage that replication copied there
// (a ransomware encryption, a DROP TABLE). At the first poll round once
// policy.pointsInTime.every has passed since the last point, it cuts one:
// for every volume group, a group snapshot of a storage group's members
// or the loose volumes' snapshots taken together, through the site's CSI
// controller (the calls of the test recovery), each asked for under a
// name recorded before the call. What a point holds is the last sync the
// primary reported in the poll just before the cut (at least that: a
// sync landing between the poll and the cut makes it newer); a group
// whose replica was not in sync then (its replication unread, not
// healthy, no sync known, or past the RPO target) says so on the point.
//
// After a point is cut, the points the policy no longer keeps are
// deleted: those beyond the newest keep, and those older than keepFor.
// The newest point is never pruned, nor a held one (UpdateHoldPoint, the
// hook a test recovery or failover from a point holds it by), nor each
// site's newest point in sync (InSync): a site a failover lost may hold
// the only one, and points cut while a replica was out of sync may be
// all that is newer; kept beyond the policy, the point says so (Kept).
// A point whose cut failed is deleted (asked again by name, then
// deleted) at the next cut. Nothing is pruned while no point is cut (a failover left the
// plan unprotected, say): the points outlive the replicas they were cut
// of. Each point, hold and prune goes to the plan's record (Points,
// Pruned), which drctl points and drctl status read.
//
// With policy.pointsInTime.cut: primary (for storage that cannot
// snapshot a replica, as ceph-csi cannot), a point is cut at the primary
// instead: the same snapshots, there, then a volume made of each
// (CreateVolume from it, named before the call) and that volume's
// replication enabled with the group's parameters, so that the storage
// ships a copy of it to the recovery site, where it is a replica like
// any other. Such a point holds every write acknowledged before its cut.
// It is usable at the recovery site once every copy has synced there (a
// poll round after the cut asks each copy's replication at the primary
// until each reports a sync); a failover to it there promotes its
// copies in place of making volumes of snapshots. At the site it was cut
// at it is usable at once, from its snapshots (a test recovery there).
// Its deletion turns each copy's replication off and deletes the copy
// and the snapshots at the primary (the storage removes the copies'
// replicas); a copy that is a volume the plan acts on (a failover
// promoted it and a reprotect made it the protected one) is never
// deleted.
//
// Only a plan with the policy takes this path: a plan without it issues
// the commands it always did (Protect auto-upgrades, see Register).

// UpdateHoldPoint holds a point in time, or releases it: a held point is
// never pruned.
const UpdateHoldPoint = names.UpdateHoldPoint

// PointInTime is one point: snapshots of every group's replicas at Site,
// cut at Taken.
type PointInTime struct {
	// ID names the point within its plan (its cut's time, UTC).
	ID    string    `json:"id"`
	Site  string    `json:"site"`
	Taken time.Time `json:"taken"`
	// LastSync is the oldest over the groups of the last sync the
	// primary reported before the cut: the point holds every write
	// acknowledged before it. Lag is Taken minus LastSync.
	LastSync time.Time     `json:"lastSync,omitzero"`
	Lag      time.Duration `json:"lag"`
	// NotInSync says which groups' replicas were not in sync at the cut,
	// and why; empty when every one was.
	NotInSync string       `json:"notInSync,omitempty"`
	Groups    []PointGroup `json:"groups"`
	// Error: the cut failed on some group (or was cut short): the point
	// is no point to recover to, and its snapshots are deleted at the
	// next cut.
	Error string `json:"error,omitempty"`
	// Held names who holds the point (a workflow id, or an operator):
	// a held point is never pruned.
	Held []string `json:"held,omitempty"`
	// PruneError is why the last deletion of the point failed; it is
	// tried again at the next cut.
	PruneError string `json:"pruneError,omitempty"`
	// CutAt is the site the point was cut at, when it is not Site
	// (policy.pointsInTime.cut: primary): its snapshots are there, and
	// each snapshot's copy (PointSnapshot.Copy) replicates to Site.
	// Synced is when every copy was found synced to Site: the point is
	// usable there from then on.
	CutAt  string    `json:"cutAt,omitempty"`
	Synced time.Time `json:"synced,omitzero"`
	// Kept says why the point stays though the policy would prune it:
	// it is the newest point in sync at its site (never pruned).
	Kept string `json:"kept,omitempty"`
}

// PointGroup is one volume group's part of a point: its snapshots, and
// its replication as polled just before the cut.
type PointGroup struct {
	Group     string        `json:"group"`
	LastSync  time.Time     `json:"lastSync,omitzero"`
	Lag       time.Duration `json:"lag"`
	NotInSync string        `json:"notInSync,omitempty"`
	// GroupSnapshot is a storage group's group snapshot, asked for as
	// GroupSnapshotName; Members are the volumes it cut.
	GroupSnapshot     string          `json:"groupSnapshot,omitempty"`
	GroupSnapshotName string          `json:"groupSnapshotName,omitempty"`
	Members           []string        `json:"members,omitempty"`
	Snapshots         []PointSnapshot `json:"snapshots"`
	Error             string          `json:"error,omitempty"`
}

// PointSnapshot is one volume's snapshot in a point: its id once the
// storage answered, and the name it was asked for under.
type PointSnapshot struct {
	Volume string `json:"volume"`
	Name   string `json:"name,omitempty"`
	ID     string `json:"id,omitempty"`
	// Size is the snapshot's size, as the storage answered: a volume
	// made of it asks for that much.
	Size int64 `json:"size,omitempty"`
	// Copy is the volume made of the snapshot at the site the point was
	// cut at, whose replication ships it to the point's site (same id
	// there), asked for as CopyName.
	Copy     string `json:"copy,omitempty"`
	CopyName string `json:"copyName,omitempty"`
	// Enabled: the copy's replication is on. A storage may take a while
	// (ceph-csi flattens a volume made of a snapshot first, answering
	// ABORTED meanwhile): the enable is asked again at each poll round
	// until it answers.
	Enabled bool `json:"enabled,omitempty"`
}

// Usable tells a point that can be recovered to at its site: every group
// was cut, and a point cut at the primary has every copy synced there.
func (pt *PointInTime) Usable() bool {
	return pt.Error == "" && (pt.CutAt == "" || !pt.Synced.IsZero())
}

// Pending tells a point cut at the primary whose copies have not all
// synced to its site yet.
func (pt *PointInTime) Pending() bool { return pt.Error == "" && pt.CutAt != "" && pt.Synced.IsZero() }

// UsableAt tells whether the point can be recovered to at site: at its
// site once usable; at the site it was cut at, from its snapshots, once
// cut.
func (pt *PointInTime) UsableAt(site string) bool {
	if pt.CutAt != "" && site == pt.CutAt {
		return pt.Error == ""
	}
	return site == pt.Site && pt.Usable()
}

// ByCopies tells whether a recovery from the point at site uses its
// replicated copies, not its snapshots.
func (pt *PointInTime) ByCopies(site string) bool { return pt.CutAt != "" && site != pt.CutAt }

// PrunedPoint is a point that was deleted, and why.
type PrunedPoint struct {
	ID     string    `json:"id"`
	Site   string    `json:"site"`
	Taken  time.Time `json:"taken"`
	Pruned time.Time `json:"pruned"`
	Why    string    `json:"why"`
}

// PointHold holds the point ID for By, or releases By's hold (Release).
// A hold of an action (By an ActionHolder) carries a worker's seal
// (Proof): protection takes no other, so that whoever may send updates
// cannot release the point a test recovery or failover runs from.
type PointHold struct {
	Point   string `json:"point"`
	By      string `json:"by"`
	Release bool   `json:"release,omitempty"`
	Proof   *Proof `json:"proof,omitempty"`
}

// actionHolderPrefix begins the holder name of an action's hold.
const actionHolderPrefix = "run "

// ActionHolder names the hold of a workflow run on the point it
// recovers from.
func ActionHolder(workflowID, runID string) string {
	return actionHolderPrefix + workflowID + "/" + runID
}

// byAction tells a hold that only a worker's seal makes or releases.
func (h PointHold) byAction() bool { return strings.HasPrefix(h.By, actionHolderPrefix) }

// keptPruned is how many of the latest pruned points a state keeps.
const keptPruned = 20

// keepPruned adds e to the latest pruned points.
func keepPruned(list []PrunedPoint, count int, e PrunedPoint) ([]PrunedPoint, int) {
	list = append(list, e)
	if len(list) > keptPruned {
		list = list[len(list)-keptPruned:]
	}
	return list, count + 1
}

// recoverySite is the plan's site that is not primary.
func recoverySite(p *plans.Plan, primary string) string {
	for _, s := range p.Sites {
		if s.Name != primary {
			return s.Name
		}
	}
	return ""
}

// pointID names a point by its cut's time.
func pointID(t time.Time) string { return t.UTC().Format("20060102T150405Z") }

// NewestPoint is the newest point that can be recovered to, or nil.
func NewestPoint(points []PointInTime) *PointInTime {
	for i := len(points) - 1; i >= 0; i-- {
		if points[i].Usable() {
			return &points[i]
		}
	}
	return nil
}

// pointDue tells whether a point is due at now.
// The last cut counts, failed or not: a storage that refuses is asked
// again a period later, not at every poll.
func (s *ProtectState) pointDue(pit *plans.PointsInTime, now time.Time) bool {
	last := s.LastCut
	if len(s.Points) > 0 && s.Points[len(s.Points)-1].Taken.After(last) {
		last = s.Points[len(s.Points)-1].Taken
	}
	if last.IsZero() {
		return true
	}
	return now.Sub(last) >= pit.Every.D() && pointID(now) != pointID(last)
}

// notInSync says why a group's replica was not in sync at its last poll,
// or "".
func notInSync(h GroupHealth, ok bool) string {
	switch {
	case !ok:
		return "its replication was not polled"
	case h.Error != "":
		return "its replication could not be read: " + h.Error
	case h.LastSync.IsZero():
		return "no sync to it is known"
	case h.Status != "" && h.Status != "HEALTHY":
		why := "replication " + h.Status
		if h.Message != "" {
			why += ": " + h.Message
		}
		return why
	case h.OutOfRPO:
		return fmt.Sprintf("its lag %v was past the RPO target", h.Lag.Round(time.Second))
	}
	return ""
}

// cutPoint cuts a point at site: every group's snapshots, cut in ctx (a
// stop or retarget cuts it short, as does an action's pause of the
// points between two calls). It returns the point, recorded or not.
func (s *ProtectState) cutPoint(ctx workflow.Context, p *plans.Plan, site string) PointInTime {
	now := workflow.Now(ctx)
	pt := PointInTime{ID: pointID(now), Site: site, Taken: now}
	at := site
	if p.Policy.PointsInTime.AtPrimary() {
		at, pt.CutAt = s.Primary, s.Primary
	}
	prefix := "drover-pit-" + p.Metadata.Name + "-" + strings.ToLower(pt.ID)
	var why []string
	for _, g := range groupNames(p) {
		h, ok := s.Groups[g]
		pg := PointGroup{Group: g, LastSync: h.LastSync, NotInSync: notInSync(h, ok)}
		if pt.CutAt != "" {
			// Cut at the primary: it holds every write acknowledged
			// before the cut, however far the replicas lag.
			pg.LastSync, pg.NotInSync = now, ""
		}
		if !pg.LastSync.IsZero() {
			pg.Lag = max(now.Sub(pg.LastSync), 0)
		}
		if pg.NotInSync != "" {
			why = append(why, g+": "+pg.NotInSync)
		}
		pt.Groups = append(pt.Groups, pg)
	}
	// The oldest last sync, none when some group has none.
	for i, pg := range pt.Groups {
		if pg.LastSync.IsZero() {
			pt.LastSync = time.Time{}
			break
		}
		if i == 0 || pg.LastSync.Before(pt.LastSync) {
			pt.LastSync = pg.LastSync
		}
	}
	if !pt.LastSync.IsZero() {
		pt.Lag = max(now.Sub(pt.LastSync), 0)
	}
	pt.NotInSync = strings.Join(why, "; ")
	byName := p.Groups()
	var errs []string
	for i := range pt.Groups {
		pg := &pt.Groups[i]
		g := byName[pg.Group]
		err := cutGroup(ctx, p, at, g.Sites[at], prefix+"-"+pg.Group, pg)
		if err == nil && pt.CutAt != "" {
			err = copyOut(ctx, p, at, g, prefix+"-"+pg.Group, pg)
		}
		if err != nil {
			pg.Error = ErrorText(err)
			errs = append(errs, pg.Group+": "+pg.Error)
		}
		if ctx.Err() != nil {
			pt.Error = "the cut was cut short (protection stopped or moved)"
			return pt
		}
		if pp := s.PointsPaused; pp != nil && pointsPaused(ctx) {
			pt.Error = "the cut was cut short: " + pp.text()
			return pt
		}
	}
	if len(errs) > 0 {
		pt.Error = "the cut failed on " + strings.Join(errs, "; ")
	}
	return pt
}

// pointCallOptions are a point's storage call options: one call within
// its deadline, as a poll's, as the next cut comes.
func pointCallOptions(p *plans.Plan, site, rpc string) workflow.ActivityOptions {
	o := activities.CallOptions(p, site, rpc)
	o.ScheduleToCloseTimeout = o.StartToCloseTimeout
	return o
}

// cutGroup cuts one group's volumes at site into pg: a group snapshot of
// a storage group's members, or the loose volumes' snapshots together.
// Names go into pg before the calls.
func cutGroup(ctx workflow.Context, p *plans.Plan, site string, ref plans.GroupRef, name string, pg *PointGroup) error {
	if ref.GroupID != "" {
		if len(ref.Members) == 0 {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("storage group %q on %s lists no members", ref.GroupID, site), ErrPreflight, nil)
		}
		pg.GroupSnapshotName, pg.Members = name, ref.Members
		e, err := activities.EndpointFor(p, site, activities.RPCCreateVolumeGroupSnapshot)
		if err != nil {
			return err
		}
		gs, err := call[activities.GroupSnapshot](ctx, pointCallOptions(p, site, activities.RPCCreateVolumeGroupSnapshot), st.CreateVolumeGroupSnapshot,
			activities.SnapshotInput{Endpoint: e, Name: name, Volumes: ref.Members})
		if err != nil {
			return err
		}
		pg.GroupSnapshot = gs.ID
		for _, sn := range gs.Snapshots {
			pg.Snapshots = append(pg.Snapshots, PointSnapshot{Volume: sn.Volume, ID: sn.ID, Size: sn.Size})
		}
		return nil
	}
	e, err := activities.EndpointFor(p, site, activities.RPCCreateSnapshot)
	if err != nil {
		return err
	}
	for _, v := range ref.Volumes {
		pg.Snapshots = append(pg.Snapshots, PointSnapshot{Volume: v, Name: name + "-" + v})
	}
	return eachTogether(ctx, len(pg.Snapshots), func(ctx workflow.Context, i int) error {
		sn := &pg.Snapshots[i]
		got, err := call[activities.Snapshot](ctx, pointCallOptions(p, site, activities.RPCCreateSnapshot), st.CreateSnapshot,
			activities.SnapshotInput{Endpoint: e, Name: sn.Name, Volumes: []string{sn.Volume}})
		sn.ID, sn.Size = got.ID, got.Size
		return err
	})
}

// copyOut makes, at site (the primary), a volume of each of pg's
// snapshots (names recorded before the calls) and enables each one's
// replication with the group's parameters, so that the storage ships it
// to the recovery site.
func copyOut(ctx workflow.Context, p *plans.Plan, site string, g *plans.VolumeGroup, name string, pg *PointGroup) error {
	e, err := activities.EndpointFor(p, site, activities.RPCCreateVolume)
	if err != nil {
		return err
	}
	for i := range pg.Snapshots {
		pg.Snapshots[i].CopyName = name + "-copy-" + pg.Snapshots[i].Volume
	}
	return eachTogether(ctx, len(pg.Snapshots), func(ctx workflow.Context, i int) error {
		sn := &pg.Snapshots[i]
		got, err := call[activities.Copy](ctx, pointCallOptions(p, site, activities.RPCCreateVolume), st.CreateVolume,
			activities.CopyInput{Endpoint: e, Name: sn.CopyName, Snapshot: sn.ID, Bytes: sn.Size})
		sn.Copy = got.ID
		if err != nil {
			return err
		}
		return enableCopy(ctx, p, site, g, sn)
	})
}

// enableCopy enables the replication of sn's copy at site: a refusal for
// good is an error; an answer that may change (ABORTED while the storage
// flattens the copy, a timeout) leaves it to the next poll round.
func enableCopy(ctx workflow.Context, p *plans.Plan, site string, g *plans.VolumeGroup, sn *PointSnapshot) error {
	err := copyReplication(ctx, p, site, g, sn.Copy, activities.RPCEnableVolumeReplication, st.EnableVolumeReplication)
	switch {
	case err == nil:
		sn.Enabled = true
	case madeNothing(err):
		return err
	}
	return nil
}

// copyGroup is group g with volume copy as its only volume at site, for
// the calls on a point's copy with the group's parameters.
func copyGroup(g *plans.VolumeGroup, site, copy string) *plans.VolumeGroup {
	return &plans.VolumeGroup{Name: g.Name, Parameters: g.Parameters, Sites: map[string]plans.GroupRef{site: {Volumes: []string{copy}}}}
}

// copyReplication calls replication rpc (fn) on a point's copy at site,
// each call within its deadline (protection's rounds).
func copyReplication(ctx workflow.Context, p *plans.Plan, site string, g *plans.VolumeGroup, copy, rpc string, fn any) error {
	return eachCopyInput(p, site, g, copy, rpc, false, func(in activities.ReplicationInput) error {
		_, err := call[struct{}](ctx, pointCallOptions(p, site, rpc), fn, in)
		return err
	})
}

// eachCopyInput calls do with each input of replication rpc on a
// point's copy at site, with its group's parameters.
func eachCopyInput(p *plans.Plan, site string, g *plans.VolumeGroup, copy, rpc string, force bool, do func(activities.ReplicationInput) error) error {
	ins, err := activities.GroupInputs(p, site, copyGroup(g, site, copy), rpc, force)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if err := do(in); err != nil {
			return err
		}
	}
	return nil
}

// syncPoints asks, for each point cut at the primary whose copies have
// not all synced to its site, each copy's replication at the primary:
// once every copy reports a sync, the point is usable there (Synced).
// A copy that does not answer, or has no sync yet, is asked again at the
// next round.
func (s *ProtectState) syncPoints(ctx, cut workflow.Context, p *plans.Plan, notes *pointNotes) {
	byName := p.Groups()
	for i := range s.Points {
		pt := &s.Points[i]
		if !pt.Pending() || pt.CutAt != s.Primary {
			continue
		}
		before := pt.Enabled()
		synced, err := syncedCopies(cut, p, byName, pt)
		switch {
		case err != nil:
			pt.Error = "a copy's replication could not be enabled: " + ErrorText(err)
		case synced:
			pt.Synced = workflow.Now(ctx)
		case pt.Enabled() == before:
			continue
		}
		notes.point(*pt)
		if cut.Err() != nil {
			return
		}
	}
}

// syncedCopies enables the replication of each copy of pt whose enable
// has not answered yet, and tells whether every copy reports a sync at
// the site it was cut at; an error is an enable refused for good.
func syncedCopies(ctx workflow.Context, p *plans.Plan, byName map[string]*plans.VolumeGroup, pt *PointInTime) (bool, error) {
	synced := true
	for i := range pt.Groups {
		pg := &pt.Groups[i]
		g, ok := byName[pg.Group]
		if !ok {
			return false, nil
		}
		for j := range pg.Snapshots {
			sn := &pg.Snapshots[j]
			if sn.Copy == "" {
				return false, nil
			}
			if !sn.Enabled {
				if err := enableCopy(ctx, p, pt.CutAt, g, sn); err != nil {
					return false, err
				}
			}
			if !sn.Enabled || !synced {
				synced = false
				continue
			}
			ins, err := activities.GroupInputs(p, pt.CutAt, copyGroup(g, pt.CutAt, sn.Copy), activities.RPCGetVolumeReplicationInfo, false)
			if err != nil {
				return false, nil
			}
			for _, in := range ins {
				info, err := call[activities.ReplicationInfo](ctx, pointCallOptions(p, pt.CutAt, activities.RPCGetVolumeReplicationInfo), st.GetVolumeReplicationInfo, in)
				if err != nil || info.LastSyncTime.IsZero() {
					synced = false
				}
			}
		}
	}
	return synced, nil
}

// Enabled counts the copies of pt whose replication is on.
func (pt *PointInTime) Enabled() int {
	n := 0
	for _, pg := range pt.Groups {
		for _, sn := range pg.Snapshots {
			if sn.Enabled {
				n++
			}
		}
	}
	return n
}

// InSync tells a point that can be recovered to and whose replicas
// were all in sync at its cut (a point cut at the primary once its
// copies have synced).
func (pt *PointInTime) InSync() bool { return pt.Usable() && pt.NotInSync == "" }

// prunable picks the points the policy no longer keeps at now, with why:
// past the newest keep, older than keepFor, or a failed cut but the one
// just cut (its failure is shown until the next), or a point cut at the
// primary whose copies had not synced when a later one's had. The newest usable
// point and held points are never picked, nor any usable point unless
// pruneUsable (a point was just cut). With keepInSync, nor is the newest
// point in sync of each site (a site that was lost may hold the only
// good copy, and points cut while a replica was out of sync may be all
// that is newer): kept names those the policy would have pruned, with
// why they stay. Keep counts them as any other point.
func prunable(points []PointInTime, pit *plans.PointsInTime, now time.Time, justCut string, pruneUsable, keepInSync bool) (out, kept map[string]string) {
	out, kept = map[string]string{}, map[string]string{}
	newest := NewestPoint(points)
	inSync := map[string]string{} // site: the id of its newest point in sync
	rank := 0
	for i := len(points) - 1; i >= 0; i-- {
		pt := &points[i]
		if pt.Pending() {
			// Its copies still ship; once a later point's have all
			// synced, they never will.
			if len(pt.Held) == 0 && rank > 0 {
				out[pt.ID] = "its copies had not synced when a later point's had"
			}
			continue
		}
		if !pt.Usable() {
			if len(pt.Held) == 0 && pt.ID != justCut {
				out[pt.ID] = "its cut failed: " + pt.Error
			}
			continue
		}
		rank++
		if _, ok := inSync[pt.Site]; !ok && pt.InSync() {
			inSync[pt.Site] = pt.ID
		}
		if len(pt.Held) > 0 || pt == newest || !pruneUsable {
			continue
		}
		why := ""
		switch {
		case pit.Keep > 0 && rank > pit.Keep:
			why = fmt.Sprintf("beyond the newest %d (keep)", pit.Keep)
		case pit.KeepFor > 0 && now.Sub(pt.Taken) > pit.KeepFor.D():
			why = fmt.Sprintf("older than %v (keepFor)", pit.KeepFor)
		}
		switch {
		case why == "":
		case keepInSync && inSync[pt.Site] == pt.ID:
			kept[pt.ID] = "the newest point in sync at " + pt.Site + ", kept though " + why
		default:
			out[pt.ID] = why
		}
	}
	return out, kept
}

// deletePoint deletes what a point made at its site: each group
// snapshot with its members, each loose snapshot; a snapshot whose
// create never answered is asked for again by its name (idempotent) and
// deleted, unless the storage refuses it for good (it made nothing).
func deletePoint(ctx workflow.Context, p *plans.Plan, pt *PointInTime) error {
	site := pt.Site
	var errs []error
	if pt.CutAt != "" {
		site = pt.CutAt
		if err := deleteCopies(ctx, p, pt); err != nil {
			// The snapshots stay while a copy made of them does.
			return err
		}
	}
	for _, pg := range pt.Groups {
		if pg.GroupSnapshotName != "" {
			id, members := pg.GroupSnapshot, make([]string, 0, len(pg.Snapshots))
			for _, sn := range pg.Snapshots {
				members = append(members, sn.ID)
			}
			if id == "" {
				gs, found, err := askAgain[activities.GroupSnapshot](ctx, p, site, activities.RPCCreateVolumeGroupSnapshot, st.CreateVolumeGroupSnapshot,
					func(e activities.Endpoint) any {
						return activities.SnapshotInput{Endpoint: e, Name: pg.GroupSnapshotName, Volumes: pg.Members}
					})
				if !found {
					errs = append(errs, err)
					continue
				}
				id, members = gs.ID, nil
				for _, sn := range gs.Snapshots {
					members = append(members, sn.ID)
				}
			}
			if err := deleteAt(ctx, p, site, activities.RPCDeleteVolumeGroupSnapshot, st.DeleteVolumeGroupSnapshot, activities.DeleteInput{ID: id, Members: members}); err != nil {
				errs = append(errs, fmt.Errorf("group snapshot %s: %w", id, err))
			}
			continue
		}
		for _, sn := range pg.Snapshots {
			id := sn.ID
			if id == "" {
				got, found, err := askAgain[activities.Snapshot](ctx, p, site, activities.RPCCreateSnapshot, st.CreateSnapshot,
					func(e activities.Endpoint) any {
						return activities.SnapshotInput{Endpoint: e, Name: sn.Name, Volumes: []string{sn.Volume}}
					})
				if !found {
					errs = append(errs, err)
					continue
				}
				id = got.ID
			}
			if err := deleteAt(ctx, p, site, activities.RPCDeleteSnapshot, st.DeleteSnapshot, activities.DeleteInput{ID: id}); err != nil {
				errs = append(errs, fmt.Errorf("snapshot %s: %w", id, err))
			}
		}
	}
	return errors.Join(errs...)
}

// askAgain asks site's storage again for what a create whose answer
// never came made, by the name it was asked for under (in builds the
// request for the endpoint of rpc): found tells that the storage has it.
// A create refused for good made nothing: not found, and no error.
func askAgain[T any](ctx workflow.Context, p *plans.Plan, site, rpc string, fn any, in func(activities.Endpoint) any) (T, bool, error) {
	var zero T
	e, err := activities.EndpointFor(p, site, rpc)
	if err != nil {
		return zero, false, err
	}
	got, err := call[T](ctx, pointCallOptions(p, site, rpc), fn, in(e))
	switch {
	case madeNothing(err):
		return zero, false, nil
	case err != nil:
		return zero, false, err
	}
	return got, true, nil
}

// deleteAt deletes what in names through site's endpoint of rpc (fn).
func deleteAt(ctx workflow.Context, p *plans.Plan, site, rpc string, fn any, in activities.DeleteInput) error {
	e, err := activities.EndpointFor(p, site, rpc)
	if err != nil {
		return err
	}
	in.Endpoint = e
	_, err = call[struct{}](ctx, pointCallOptions(p, site, rpc), fn, in)
	return err
}

// deleteCopies deletes the copies of a point cut at the primary, at the
// site it was cut at: each copy's replication turned off (the storage
// removes its replica at the point's site), then the copy deleted. A
// copy whose create never answered is asked for again by its name
// first. A copy that is a volume the plan acts on (a failover promoted
// it, a reprotect made it the protected one) is left: it is no longer
// the point's.
func deleteCopies(ctx workflow.Context, p *plans.Plan, pt *PointInTime) error {
	site := pt.CutAt
	live := planVolumes(p)
	byName := p.Groups()
	var errs []error
	for _, pg := range pt.Groups {
		for _, sn := range pg.Snapshots {
			id := sn.Copy
			if id == "" && sn.CopyName != "" && sn.ID != "" {
				got, found, err := askAgain[activities.Copy](ctx, p, site, activities.RPCCreateVolume, st.CreateVolume,
					func(e activities.Endpoint) any {
						return activities.CopyInput{Endpoint: e, Name: sn.CopyName, Snapshot: sn.ID, Bytes: sn.Size}
					})
				if !found {
					errs = append(errs, err)
					continue
				}
				id = got.ID
			}
			if id == "" || live[id] {
				continue
			}
			if g, ok := byName[pg.Group]; ok {
				err := copyReplication(ctx, p, site, g, id, activities.RPCDisableVolumeReplication, st.DisableVolumeReplication)
				if err != nil && !madeNothing(err) {
					errs = append(errs, fmt.Errorf("copy %s: %w", id, err))
					continue
				}
			}
			if err := deleteAt(ctx, p, site, activities.RPCDeleteVolume, st.DeleteVolume, activities.DeleteInput{ID: id}); err != nil {
				errs = append(errs, fmt.Errorf("copy %s: %w", id, err))
			}
		}
	}
	return errors.Join(errs...)
}

// planVolumes are the volumes p acts on, at every site.
func planVolumes(p *plans.Plan) map[string]bool {
	out := map[string]bool{}
	for _, g := range p.VolumeGroups {
		// Fills a set: the order does not matter.
		//workflowcheck:ignore
		for _, ref := range g.Sites {
			for _, v := range groupVolumes(ref) {
				out[v] = true
			}
		}
	}
	return out
}

// madeNothing tells a create asked again by name that the storage
// refuses for good: there is nothing of that name to delete. A call an
// action's pause of the points kept from starting asked nothing.
func madeNothing(err error) bool {
	var ae *temporal.ApplicationError
	return err != nil && errors.As(err, &ae) && ae.NonRetryable() && ae.Type() != errPointsPaused
}

// keepInSyncVersion marks the protections that never prune a site's
// newest point in sync (prunable).
const keepInSyncVersion = "keep-in-sync-point"

// keepPoints cuts a point at the recovery site when one is due and prunes
// what the policy no longer keeps; each change goes to the plan's
// record. cut is the context of the storage calls (a stop or retarget
// cancels it), ctx the workflow's.
func (s *ProtectState) keepPoints(ctx, cut workflow.Context, p *plans.Plan, pruning map[string]bool, notes *pointNotes) {
	pit := p.Policy.PointsInTime
	now := workflow.Now(ctx)
	if s.PointsSince.IsZero() {
		s.PointsSince = now
	}
	if s.PointsPaused != nil && s.resumePoints(cut, p.Metadata.Name) {
		// An action paused the points and still runs.
		return
	}
	s.syncPoints(ctx, cut, p, notes)
	if !s.pointDue(pit, now) || cut.Err() != nil || pointsPaused(cut) {
		return
	}
	site := recoverySite(p, s.Primary)
	pt := s.cutPoint(cut, p, site)
	s.Points, s.LastCut = append(s.Points, pt), pt.Taken
	notes.point(pt)
	if !pt.Usable() {
		workflow.GetLogger(ctx).Warn("a point in time failed", "plan", p.Metadata.Name, "point", pt.ID, "error", pt.Error)
	}
	if cut.Err() == nil && !pointsPaused(cut) {
		// Picked and marked in one go: a hold that comes while the
		// deletions run finds the point being pruned and is refused.
		// Points pruned before this rule came keep being pruned as they
		// were in a run that began before it.
		keepInSync := workflow.GetVersion(ctx, keepInSyncVersion, workflow.DefaultVersion, 1) >= 1
		why, kept := prunable(s.Points, pit, workflow.Now(ctx), pt.ID, pt.Error == "", keepInSync)
		var doomed []int
		for i := range s.Points {
			if keepInSync && pt.Error == "" && s.Points[i].Kept != kept[s.Points[i].ID] {
				s.Points[i].Kept = kept[s.Points[i].ID]
				notes.point(s.Points[i])
			}
			if _, ok := why[s.Points[i].ID]; ok {
				pruning[s.Points[i].ID] = true
				doomed = append(doomed, i)
			}
		}
		gone := map[string]bool{}
		for _, i := range doomed {
			x := &s.Points[i]
			err := deletePoint(cut, p, x)
			delete(pruning, x.ID)
			if err != nil {
				x.PruneError = ErrorText(err)
				notes.point(*x)
				continue
			}
			gone[x.ID] = true
			e := PrunedPoint{ID: x.ID, Site: x.Site, Taken: x.Taken, Pruned: workflow.Now(ctx), Why: why[x.ID]}
			s.Pruned, s.PrunedCount = keepPruned(s.Pruned, s.PrunedCount, e)
			notes.add(RecordChange{Pruned: &e})
		}
		s.Points = slices.DeleteFunc(s.Points, func(x PointInTime) bool { return gone[x.ID] })
	}
}

// pointNotes sends protection's changes of points (cuts, holds, prunes)
// to the plan's record in the order they were made, each as it was then:
// one goroutine sends what is queued, as one signal (best effort, as
// protection's summary: logged when it fails). A change is queued the
// moment it is made, so a hold that comes while a cut's deletions run
// reaches the record in its place.
type pointNotes struct {
	queue   []RecordChange
	sending bool
}

// add queues a change.
func (n *pointNotes) add(c RecordChange) { n.queue = append(n.queue, c) }

// point queues a point as it is now.
func (n *pointNotes) point(pt PointInTime) {
	pt.Held = slices.Clone(pt.Held)
	n.add(RecordChange{Point: &pt})
}

// idle tells that every change queued has been sent.
func (n *pointNotes) idle() bool { return len(n.queue) == 0 && !n.sending }

// send sends the queued changes, for as long as ctx lives.
func (n *pointNotes) send(ctx workflow.Context, plan string) {
	for {
		if err := workflow.Await(ctx, func() bool { return len(n.queue) > 0 }); err != nil {
			return
		}
		c := n.queue[0]
		c.More = n.queue[1:]
		n.queue, n.sending = nil, true
		if err := note(ctx, plan, c); err != nil {
			workflow.GetLogger(ctx).Warn("the plan's record did not take the points in time", "error", err)
		}
		n.sending = false
	}
}

// hold holds or releases a point (UpdateHoldPoint); the point it returns
// is the state's own.
func (s *ProtectState) hold(h PointHold) (*PointInTime, error) {
	i := slices.IndexFunc(s.Points, func(x PointInTime) bool { return x.ID == h.Point })
	if i < 0 {
		return nil, fmt.Errorf("no point %q: drctl points lists the plan's points", h.Point)
	}
	pt := &s.Points[i]
	if h.Release {
		pt.Held = slices.DeleteFunc(pt.Held, func(b string) bool { return b == h.By })
	} else if !slices.Contains(pt.Held, h.By) {
		pt.Held = append(pt.Held, h.By)
	}
	return pt, nil
}

// validHold refuses a hold protection cannot take.
func (s *ProtectState) validHold(h PointHold, pruning map[string]bool) error {
	switch {
	case h.Point == "" || h.By == "":
		return errors.New("a hold names the point and who holds it")
	case pruning[h.Point]:
		return fmt.Errorf("point %q is being pruned", h.Point)
	}
	i := slices.IndexFunc(s.Points, func(x PointInTime) bool { return x.ID == h.Point })
	switch {
	case i < 0:
		return fmt.Errorf("no point %q: drctl points lists the plan's points", h.Point)
	case !h.Release && s.Points[i].Error != "":
		return fmt.Errorf("point %q is no point to recover to: %s", h.Point, s.Points[i].Error)
	}
	return nil
}

// ErrNotHeld is the refusal of a release of a hold its holder does not
// have: nothing was released.
const ErrNotHeld = "NotHeld"

// validRelease refuses an operator's release of a hold that is not
// theirs (in the update's validator only: an action's release, sealed,
// stays as it was, taken whether or not it still holds).
func (s *ProtectState) validRelease(h PointHold) error {
	if !h.Release || h.byAction() {
		return nil
	}
	i := slices.IndexFunc(s.Points, func(x PointInTime) bool { return x.ID == h.Point })
	if i < 0 || slices.Contains(s.Points[i].Held, h.By) {
		return nil
	}
	held := "nobody"
	if len(s.Points[i].Held) > 0 {
		held = strings.Join(s.Points[i].Held, ", ")
	}
	return temporal.NewApplicationError(fmt.Sprintf("%s holds no hold of point %q: nothing was released (it is held by %s)", h.By, h.Point, held), ErrNotHeld)
}

// reportPoints sets the points' metrics: the newest usable point's age
// (since protection first looked for one, while there is none), and the
// age the policy allows: every, plus the poll interval the cut waits for.
func (s *ProtectState) reportPoints(ctx workflow.Context, p *plans.Plan, interval time.Duration) {
	pit := p.Policy.PointsInTime
	if pit == nil || s.PointsSince.IsZero() {
		return
	}
	m := workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"plan": p.Metadata.Name})
	since := s.PointsSince
	if pt := NewestPoint(s.Points); pt != nil {
		since = pt.Taken
	}
	m.Gauge(MetricPointAge).Update(max(workflow.Now(ctx).Sub(since), 0).Seconds())
	m.Gauge(MetricPointMaxAge).Update((pit.Every.D() + interval).Seconds())
}

// RecordedPoints are the points in time a plan's record holds.
type RecordedPoints struct {
	Points      []PointInTime `json:"points,omitempty"`
	Pruned      []PrunedPoint `json:"pruned,omitempty"`
	PrunedCount int           `json:"prunedCount,omitempty"`
}

// RecordedPoints reads the points in time the plan's record holds: a
// protection started anew takes them over, so that the points of one
// that was stopped are still pruned. The record takes only changes a
// worker sealed: whoever may start workflows cannot make protection
// delete a snapshot it did not cut.
func (rr *RunReader) RecordedPoints(ctx context.Context, plan string) (RecordedPoints, error) {
	if rr == nil || rr.Client == nil {
		return RecordedPoints{}, temporal.NewNonRetryableApplicationError("this worker has no client to read the plan's record", errNoRun, nil)
	}
	rec, err := ReadRecord(ctx, rr.Client, plan)
	if err != nil || rec == nil {
		return RecordedPoints{}, err
	}
	return RecordedPoints{Points: rec.Points, Pruned: rec.Pruned, PrunedCount: rec.PrunedCount}, nil
}

// recordReadOptions bound the read of the record at a protection's
// start: a local activity, which holds the workflow task.
var recordReadOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: 20 * time.Second,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 5 * time.Second, NonRetryableErrorTypes: []string{errNoRun}},
}

// adoptPoints takes over the points in time the plan's record holds, at
// a protection's start (best effort: a record that cannot be read leaves
// its points to the next start).
func (s *ProtectState) adoptPoints(ctx workflow.Context, plan string) {
	var rr *RunReader
	var got RecordedPoints
	if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, recordReadOptions), rr.RecordedPoints, plan).Get(ctx, &got); err != nil {
		workflow.GetLogger(ctx).Warn("could not read the points in time of the plan's record; they are not pruned until a protection takes them over", "plan", plan, "error", err)
		return
	}
	s.Points, s.Pruned, s.PrunedCount = got.Points, got.Pruned, got.PrunedCount
}
