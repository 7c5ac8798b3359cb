package plans

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// RPCs are the CSI-Addons RPC names, and the CSI controller's a test
// recovery calls, that a plan may set deadlines and call parameters for.
var RPCs = []string{
	"GetIdentity", "GetCapabilities", "Probe",
	"FenceClusterNetwork", "UnfenceClusterNetwork", "ListClusterFence", "GetFenceClients",
	"EnableVolumeReplication", "DisableVolumeReplication", "PromoteVolume", "DemoteVolume", "ResyncVolume", "GetVolumeReplicationInfo",
	"CreateSnapshot", "DeleteSnapshot", "CreateVolume", "DeleteVolume", "CreateVolumeGroupSnapshot", "DeleteVolumeGroupSnapshot",
}

// Gates are the approval gates a plan may set.
var Gates = []string{"beforeFence", "beforePromote", "beforeStart", "beforeDemote"}

// NomadStops are the ways a Nomad workload may be stopped.
var NomadStops = []string{"deregister", "scale"}

// OnFailures are what a step that fails for good may do.
var OnFailures = []string{"pause", "abort"}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validate runs the semantic checks on a decoded plan; d locates errors.
func (p *Plan) validate(d *decoder) {
	bad := func(path, format string, args ...any) {
		at := d.locate(path)
		d.errs = append(d.errs, &FieldError{File: d.file, Line: at.line, Column: at.col, Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	// uniqueName checks list[i].name: a valid name, not used before in the
	// list; seen maps each name to its first index.
	uniqueName := func(seen map[string]int, list, what, name string, i int, invalid string) {
		path := fmt.Sprintf("%s[%d].name", list, i)
		if name != "" && !nameRE.MatchString(name) {
			bad(path, invalid, name)
		} else if j, dup := seen[name]; dup && name != "" {
			bad(path, "%s %q is already defined at %s[%d]", what, name, list, j)
		}
		seen[name] = i
	}
	if d.present["apiVersion"] && p.APIVersion != APIVersion {
		bad("apiVersion", "%q is not supported; use %q", p.APIVersion, APIVersion)
	}
	if d.present["kind"] && p.Kind != Kind {
		bad("kind", "%q is not a plan; use %q", p.Kind, Kind)
	}
	if d.present["metadata.name"] && !nameRE.MatchString(p.Metadata.Name) {
		bad("metadata.name", "%q is not a valid name: use lower-case letters, digits and dashes, at most 63", p.Metadata.Name)
	}
	if p.Metadata.Tier < 0 {
		bad("metadata.tier", "%d is not a tier: use 0 or more (lower tiers go first in a site action)", p.Metadata.Tier)
	}

	// Sites.
	siteNames := map[string]int{}
	if d.present["sites"] && len(p.Sites) != 2 {
		bad("sites", "a plan has exactly two sites, this one has %d", len(p.Sites))
	}
	for i, s := range p.Sites {
		sp := fmt.Sprintf("sites[%d]", i)
		uniqueName(siteNames, "sites", "site", s.Name, i, "%q is not a valid site name")
		st := s.Storage
		if st.Endpoint == "" && (st.Identity == "" || st.Fence == "" || st.Replication == "") && d.present[sp+".storage"] {
			bad(sp+".storage", "give endpoint, or all of identity, fence and replication")
		}
		for _, k := range []struct{ key, v string }{{"endpoint", st.Endpoint}, {"identity", st.Identity}, {"fence", st.Fence}, {"replication", st.Replication}, {"csi", st.CSI}} {
			if k.v != "" {
				if err := checkEndpoint(k.v); err != nil {
					bad(sp+".storage."+k.key, "%v", err)
				}
			}
		}
		checkTLS(bad, sp+".storage.tls", st.TLS)
		checkSecret(bad, sp+".storage.secret", st.Secret)
		for _, rpc := range sortedKeys(st.CallParameters) {
			if !contains(RPCs, rpc) {
				bad(sp+".storage.callParameters."+rpc, "unknown RPC %q (one of %s)", rpc, strings.Join(RPCs, ", "))
			}
		}
		for j, c := range s.Fence.CIDRs {
			if _, err := netip.ParsePrefix(c); err != nil {
				bad(fmt.Sprintf("%s.fence.cidrs[%d]", sp, j), "%q is not a CIDR", c)
			}
		}
		if s.Fence.Unavailable && len(s.Fence.CIDRs) > 0 {
			bad(sp+".fence", "cidrs are given but fencing is declared unavailable; keep one")
		}
		o := s.Orchestrator
		switch {
		case o.Nomad != nil && o.Exec != nil:
			bad(sp+".orchestrator", "give one of nomad or exec, not both")
		case o.Nomad == nil && o.Exec == nil && d.present[sp+".orchestrator"]:
			bad(sp+".orchestrator", "give one of nomad or exec")
		case o.Nomad != nil:
			if o.Nomad.Address != "" {
				if u, err := url.Parse(o.Nomad.Address); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					bad(sp+".orchestrator.nomad.address", "%q is not an http(s) URL", o.Nomad.Address)
				}
			}
			checkSecret(bad, sp+".orchestrator.nomad.token", o.Nomad.Token)
			checkTLS(bad, sp+".orchestrator.nomad.tls", o.Nomad.TLS)
		case o.Exec != nil:
			checkHookEnv(bad, sp+".orchestrator.exec", o.Exec.Env, o.Exec.SecretEnv)
		}
	}
	twoSites := len(p.Sites) == 2
	checkSiteKeys := func(path string, keys []string) {
		if !twoSites {
			return
		}
		for _, k := range keys {
			if _, ok := siteNames[k]; !ok {
				bad(path+"."+k, "unknown site %q (sites are %s and %s)", k, p.Sites[0].Name, p.Sites[1].Name)
			}
		}
		for _, s := range p.Sites {
			if !contains(keys, s.Name) && s.Name != "" {
				bad(path, "site %q is missing", s.Name)
			}
		}
	}

	// Volume groups.
	groups := map[string]int{}
	if d.present["volumeGroups"] && len(p.VolumeGroups) == 0 {
		bad("volumeGroups", "a plan protects at least one volume group")
	}
	for i, g := range p.VolumeGroups {
		gp := fmt.Sprintf("volumeGroups[%d]", i)
		uniqueName(groups, "volumeGroups", "volume group", g.Name, i, "%q is not a valid name")
		if g.Priority < 0 {
			bad(gp+".priority", "priority %d is negative", g.Priority)
		}
		keys := sortedKeys(g.Sites)
		checkSiteKeys(gp+".sites", keys)
		for _, k := range keys {
			ref := g.Sites[k]
			rp := gp + ".sites." + k
			switch {
			case ref.GroupID != "" && len(ref.Volumes) > 0:
				bad(rp, "give groupID or volumes, not both")
			case ref.GroupID == "" && len(ref.Volumes) == 0:
				bad(rp, "give groupID or volumes")
			case ref.GroupID == "" && len(ref.Members) > 0:
				bad(rp+".members", "members name a storage group's volumes: give them with groupID (loose volumes are listed under volumes)")
			}
			seenMember := map[string]bool{}
			for j, v := range ref.Members {
				if v == "" || seenMember[v] {
					bad(fmt.Sprintf("%s.members[%d]", rp, j), "member %q is empty or listed twice", v)
				}
				seenMember[v] = true
			}
			seen := map[string]bool{}
			for j, v := range ref.Volumes {
				if v == "" {
					bad(fmt.Sprintf("%s.volumes[%d]", rp, j), "volume id is empty")
				} else if seen[v] {
					bad(fmt.Sprintf("%s.volumes[%d]", rp, j), "volume %q is listed twice", v)
				}
				seen[v] = true
			}
		}
	}

	// Workloads.
	workloads := map[string]int{}
	for i, w := range p.Workloads {
		wp := fmt.Sprintf("workloads[%d]", i)
		uniqueName(workloads, "workloads", "workload", w.Name, i, "%q is not a valid name")
		if w.Priority < 0 {
			bad(wp+".priority", "priority %d is negative", w.Priority)
		}
		for j, g := range w.VolumeGroups {
			if _, ok := groups[g]; !ok {
				bad(fmt.Sprintf("%s.volumeGroups[%d]", wp, j), "no volume group is named %q", g)
			}
		}
		keys := sortedKeys(w.Sites)
		checkSiteKeys(wp+".sites", keys)
		for _, k := range keys {
			ref := w.Sites[k]
			rp := wp + ".sites." + k
			site := p.Site(k)
			switch {
			case ref.Nomad != nil && ref.Exec != nil:
				bad(rp, "give one of nomad or exec, not both")
			case ref.Nomad == nil && ref.Exec == nil:
				bad(rp, "give one of nomad or exec")
			case ref.Nomad != nil:
				if site != nil && site.Orchestrator.Nomad == nil && site.Orchestrator.Exec != nil {
					bad(rp+".nomad", "site %q runs exec hooks, not Nomad", k)
				}
				if ref.Nomad.Stop != "" && !contains(NomadStops, ref.Nomad.Stop) {
					bad(rp+".nomad.stop", "%q is not deregister or scale", ref.Nomad.Stop)
				}
				for _, tg := range sortedKeys(ref.Nomad.Groups) {
					if ref.Nomad.Groups[tg] < 0 {
						bad(rp+".nomad.groups."+tg, "count %d is negative", ref.Nomad.Groups[tg])
					}
				}
				if ref.Nomad.Stop == "scale" && len(ref.Nomad.Groups) == 0 {
					bad(rp+".nomad.groups", "stop: scale needs the task-group counts to start with")
				}
			case ref.Exec != nil:
				if site != nil && site.Orchestrator.Exec == nil && site.Orchestrator.Nomad != nil {
					bad(rp+".exec", "site %q runs Nomad, not exec hooks", k)
				}
				if strings.TrimSpace(ref.Exec.Start) == "" && d.present[rp+".exec.start"] {
					bad(rp+".exec.start", "command is empty")
				}
				if strings.TrimSpace(ref.Exec.Stop) == "" && d.present[rp+".exec.stop"] {
					bad(rp+".exec.stop", "command is empty")
				}
				checkHookEnv(bad, rp+".exec", ref.Exec.Env, ref.Exec.SecretEnv)
				for i, c := range ref.Exec.RetryExitCodes {
					if c < 1 || c > 255 {
						bad(fmt.Sprintf("%s.exec.retryExitCodes[%d]", rp, i), "exit code %d is not in 1..255", c)
					}
				}
			}
		}
	}

	// Policy.
	pol := p.Policy
	if pol.Parallelism < 0 {
		bad("policy.parallelism", "parallelism %d is negative", pol.Parallelism)
	}
	if pol.Retry.BackoffCoefficient != 0 && pol.Retry.BackoffCoefficient < 1 {
		bad("policy.retry.backoffCoefficient", "%v is below 1", pol.Retry.BackoffCoefficient)
	}
	if pol.Retry.MaximumAttempts < 0 {
		bad("policy.retry.maximumAttempts", "%d is negative", pol.Retry.MaximumAttempts)
	}
	if pol.Retry.InitialInterval != 0 && pol.Retry.MaximumInterval != 0 && pol.Retry.MaximumInterval < pol.Retry.InitialInterval {
		bad("policy.retry.maximumInterval", "%s is below initialInterval %s", pol.Retry.MaximumInterval, pol.Retry.InitialInterval)
	}
	for _, k := range sortedKeys(pol.Deadlines) {
		if k != "default" && !contains(RPCs, k) {
			bad("policy.deadlines."+k, "unknown RPC %q (one of default, %s)", k, strings.Join(RPCs, ", "))
		}
	}
	if pol.OnFailure != "" && !contains(OnFailures, pol.OnFailure) {
		bad("policy.onFailure", "%q is not pause or abort", pol.OnFailure)
	}
	for i, g := range pol.Approvals {
		if !contains(Gates, g) {
			bad(fmt.Sprintf("policy.approvals[%d]", i), "unknown gate %q (one of %s)", g, strings.Join(Gates, ", "))
		}
	}
	if pit := pol.PointsInTime; pit != nil {
		p.validatePoints(bad, func(path string) bool { return d.present[path] }, pit)
	}
	if dr := pol.Drills; dr != nil {
		if dr.Drill < 0 || (dr.Drill > 0 && dr.Drill < MinDrillEvery) {
			bad("policy.drills.drill", "%s is too short: at least %s (e.g. drill: 168h)", dr.Drill, MinDrillEvery)
		}
		if dr.TestRecovery < 0 || (dr.TestRecovery > 0 && dr.TestRecovery < MinDrillEvery) {
			bad("policy.drills.testRecovery", "%s is too short: at least %s (e.g. testRecovery: 2160h)", dr.TestRecovery, MinDrillEvery)
		}
		if dr.Drill == 0 && dr.TestRecovery == 0 {
			bad("policy.drills", "say how often a drill (drill: 168h), a test recovery (testRecovery: 2160h) or both must succeed")
		}
	}
}

// MinDrillEvery is the shortest interval policy.drills accepts.
const MinDrillEvery = Duration(time.Minute)

// MinPointEvery is the shortest interval between points in time.
const MinPointEvery = Duration(time.Second)

// validatePoints checks policy.pointsInTime: how often, how many or how
// long, and a storage group's members on every site (its points are one
// group snapshot of them, at whichever site is not primary).
func (p *Plan) validatePoints(bad func(string, string, ...any), present func(string) bool, pit *PointsInTime) {
	const at = "policy.pointsInTime"
	if pit.Every < MinPointEvery {
		bad(at+".every", "every %s is too short: points are cut at most once a second (e.g. every: 15m)", pit.Every)
	}
	if pit.Keep < 0 || (pit.Keep == 0 && present(at+".keep")) {
		bad(at+".keep", "keep %d keeps no point: give 1 or more, or leave it out and give keepFor", pit.Keep)
	}
	if pit.KeepFor < 0 {
		bad(at+".keepFor", "keepFor %s is negative", pit.KeepFor)
	}
	if pit.Cut != "" && !contains(Cuts, pit.Cut) {
		bad(at+".cut", "%q is not replicas or primary", pit.Cut)
	}
	if pit.Keep == 0 && pit.KeepFor == 0 {
		bad(at, "say how many points to keep (keep: N) or for how long (keepFor: 7d), or both")
	}
	if pit.KeepFor > 0 && pit.Every >= MinPointEvery && pit.KeepFor < pit.Every {
		bad(at+".keepFor", "keepFor %s is shorter than every %s: each point would be pruned before the next is cut", pit.KeepFor, pit.Every)
	}
	for i, g := range p.VolumeGroups {
		for _, k := range sortedKeys(g.Sites) {
			if ref := g.Sites[k]; ref.GroupID != "" && len(ref.Members) == 0 {
				bad(fmt.Sprintf("volumeGroups[%d].sites.%s", i, k), "storage group %q needs its volumes listed under members for points in time (a group snapshot of them)", ref.GroupID)
			}
		}
	}
}

func checkEndpoint(ep string) error {
	if path, ok := strings.CutPrefix(ep, "unix://"); ok {
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("%q: a unix endpoint needs an absolute path (unix:///run/csi-addons.sock)", ep)
		}
		return nil
	}
	if strings.Contains(ep, "://") {
		return fmt.Errorf("%q: use unix:///path or host:port", ep)
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%q is not unix:///path or host:port", ep)
	}
	return nil
}

func checkTLS(bad func(string, string, ...any), path string, t *TLS) {
	if t == nil {
		return
	}
	if (t.Cert == "") != (t.Key == "") {
		bad(path, "cert and key go together: give both or neither")
	}
}

func checkSecret(bad func(string, string, ...any), path string, s *SecretRef) {
	if s == nil {
		return
	}
	if (s.Env == "") == (s.File == "") {
		bad(path, "give one of env or file")
	}
}

// checkHookEnv checks a hook environment's names: variables a shell can
// name, none set twice, and none of the DROVER_* names Drover sets.
func checkHookEnv(bad func(string, string, ...any), path string, env map[string]string, secret map[string]SecretKey) {
	for _, k := range sortedKeys(env) {
		checkEnvName(bad, path+".env."+k, k)
		if _, ok := secret[k]; ok {
			bad(path+".secretEnv."+k, "%s is also in env; give it once", k)
		}
	}
	for _, k := range sortedKeys(secret) {
		checkEnvName(bad, path+".secretEnv."+k, k)
		s := secret[k]
		if (s.Env == "") == (s.File == "") {
			bad(path+".secretEnv."+k, "give one of env or file")
		}
		if s.Key == "" {
			bad(path+".secretEnv."+k+".key", "name the secret's key")
		}
	}
}

func checkEnvName(bad func(string, string, ...any), path, name string) {
	if !envName.MatchString(name) {
		bad(path, "%q is not an environment variable name (letters, digits and _, not starting with a digit)", name)
	} else if reservedEnv[name] {
		bad(path, "%s is set by Drover for every hook", name)
	}
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are the variables Drover sets for every hook.
var reservedEnv = map[string]bool{"DROVER_PLAN": true, "DROVER_SITE": true, "DROVER_WORKLOAD": true, "DROVER_ACTION": true, "DROVER_HOOK": true}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
