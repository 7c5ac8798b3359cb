package nomadfake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/nomad/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The CSI volume and snapshot endpoints, as Nomad's servers serve them:
// each call that makes or deletes something goes to the controller of the
// volume's plugin (AddPlugin: a CSI endpoint, the storage simulator in
// the tests), and volumes it creates are registered in the namespace of
// the request. A job's task group that mounts a CSI volume the job's
// namespace does not hold fails to place, and a volume a running
// allocation mounts cannot be deleted.

// AddPlugin makes a CSI controller plugin, served at a gRPC address,
// healthy under id.
func (s *Server) AddPlugin(id, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plugins == nil {
		s.plugins = map[string]string{}
	}
	s.plugins[id] = addr
}

// Volume returns the registered CSI volume id of namespace, or nil.
func (s *Server) Volume(namespace, id string) *api.CSIVolume {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.volumeLocked(namespace, id)
}

func (s *Server) findVolume(namespace, id string) (int, *api.CSIVolumeListStub) {
	for i, v := range s.volumes {
		if v.ID == id && v.Namespace == namespace {
			return i, v
		}
	}
	return -1, nil
}

func (s *Server) volumeLocked(namespace, id string) *api.CSIVolume {
	_, v := s.findVolume(namespace, id)
	if v == nil {
		return nil
	}
	out := &api.CSIVolume{ID: v.ID, Name: v.Name, ExternalID: v.ExternalID, Namespace: v.Namespace, PluginID: v.PluginID,
		AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, Schedulable: v.Schedulable, Provider: v.Provider,
		CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex}
	if x := s.volExtra[key(namespace, id)]; x != nil {
		out.SnapshotID, out.RequestedCapabilities = x.SnapshotID, x.RequestedCapabilities
	}
	return out
}

// controller dials the plugin's controller, or says why it cannot.
func (s *Server) controller(plugin string) (csi.ControllerClient, func(), error) {
	s.mu.Lock()
	addr, ok := s.plugins[plugin]
	s.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("plugin %q not found", plugin)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return csi.NewControllerClient(conn), func() { conn.Close() }, nil
}

// rpcError answers a failed plugin call as Nomad's servers do: 500 with
// the plugin's error in the text.
func rpcError(w http.ResponseWriter, what string, err error) {
	http.Error(w, fmt.Sprintf("%s: rpc error: controller %s: %v", what, status.Code(err), err), http.StatusInternalServerError)
}

func (s *Server) volumeInfo(w http.ResponseWriter, r *http.Request) {
	v := s.Volume(namespaceOf(r), r.PathValue("id"))
	if v == nil {
		http.Error(w, "volume not found", http.StatusNotFound)
		return
	}
	s.reply(w, v)
}

func (s *Server) snapshotCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CSISnapshotCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Snapshots) == 0 {
		http.Error(w, "invalid snapshot request", http.StatusBadRequest)
		return
	}
	resp := api.CSISnapshotCreateResponse{}
	for _, sn := range req.Snapshots {
		v := s.Volume(namespaceOf(r), sn.SourceVolumeID)
		if v == nil {
			http.Error(w, fmt.Sprintf("volume %q not found", sn.SourceVolumeID), http.StatusBadRequest)
			return
		}
		cc, done, err := s.controller(v.PluginID)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		out, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: sn.Name, SourceVolumeId: v.ExternalID, Parameters: sn.Parameters})
		cancel()
		done()
		if err != nil {
			rpcError(w, "snapshot "+sn.Name, err)
			return
		}
		resp.Snapshots = append(resp.Snapshots, &api.CSISnapshot{ID: out.Snapshot.SnapshotId, ExternalSourceVolumeID: v.ExternalID,
			SourceVolumeID: v.ID, PluginID: v.PluginID, SizeBytes: out.Snapshot.SizeBytes,
			CreateTime: out.Snapshot.CreationTime.AsTime().Unix(), IsReady: out.Snapshot.ReadyToUse})
	}
	s.reply(w, resp)
}

func (s *Server) snapshotDelete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cc, done, err := s.controller(q.Get("plugin_id"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	defer done()
	if _, err := cc.DeleteSnapshot(r.Context(), &csi.DeleteSnapshotRequest{SnapshotId: q.Get("snapshot_id")}); err != nil {
		rpcError(w, "delete snapshot", err)
		return
	}
	s.reply(w, nil)
}

func (s *Server) volumeCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CSIVolumeCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Volumes) != 1 {
		http.Error(w, "volume create takes one volume", http.StatusBadRequest)
		return
	}
	vol := req.Volumes[0]
	ns := vol.Namespace
	if ns == "" {
		ns = namespaceOf(r)
	}
	if s.Volume(ns, vol.ID) != nil {
		http.Error(w, fmt.Sprintf("volume %q already exists", vol.ID), http.StatusBadRequest)
		return
	}
	cc, done, err := s.controller(vol.PluginID)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	defer done()
	creq := &csi.CreateVolumeRequest{Name: vol.Name, Parameters: vol.Parameters}
	for _, c := range vol.RequestedCapabilities {
		creq.VolumeCapabilities = append(creq.VolumeCapabilities, capability(c))
	}
	if vol.SnapshotID != "" {
		creq.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: vol.SnapshotID}}}
	}
	out, err := cc.CreateVolume(r.Context(), creq)
	if err != nil {
		rpcError(w, "volume create", err)
		return
	}
	stub := api.CSIVolumeListStub{ID: vol.ID, Name: vol.Name, ExternalID: out.Volume.VolumeId, Namespace: ns, PluginID: vol.PluginID, Schedulable: true}
	s.AddVolume(stub)
	s.mu.Lock()
	if s.volExtra == nil {
		s.volExtra = map[string]*api.CSIVolume{}
	}
	s.volExtra[key(ns, vol.ID)] = &api.CSIVolume{SnapshotID: vol.SnapshotID, RequestedCapabilities: vol.RequestedCapabilities}
	got := s.volumeLocked(ns, vol.ID)
	s.mu.Unlock()
	s.reply(w, api.CSIVolumeCreateResponse{Volumes: []*api.CSIVolume{got}})
}

// claimedBy names a job whose running allocations mount volume id of
// namespace ns, or "".
func (s *Server) claimedBy(ns, id string, now time.Time) string {
	for k, j := range s.jobs {
		if j.spec.Namespace == nil || *j.spec.Namespace != ns {
			continue
		}
		for _, tg := range j.spec.TaskGroups {
			mounts := slices.ContainsFunc(mapValues(tg.Volumes), func(v *api.VolumeRequest) bool { return v.Type == "csi" && v.Source == id })
			if !mounts {
				continue
			}
			for _, a := range j.allocs {
				if a.group == *tg.Name && a.stopped.IsZero() && s.clientStatus(j, a, now) == "running" {
					return k
				}
			}
		}
	}
	return ""
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func (s *Server) volumeDelete(w http.ResponseWriter, r *http.Request) {
	ns, id := namespaceOf(r), r.PathValue("id")
	s.mu.Lock()
	v := s.volumeLocked(ns, id)
	claim := ""
	if v != nil {
		claim = s.claimedBy(ns, id, time.Now())
	}
	s.mu.Unlock()
	switch {
	case v == nil:
		http.Error(w, fmt.Sprintf("volume not found: %s", id), http.StatusBadRequest)
		return
	case claim != "":
		http.Error(w, fmt.Sprintf("volume %q is in use by job %s", id, claim), http.StatusBadRequest)
		return
	}
	cc, done, err := s.controller(v.PluginID)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	defer done()
	if _, err := cc.DeleteVolume(r.Context(), &csi.DeleteVolumeRequest{VolumeId: v.ExternalID}); err != nil {
		rpcError(w, "volume delete", err)
		return
	}
	s.deregisterVolume(ns, id)
	s.reply(w, nil)
}

// volumeRegister registers existing volumes, each validated by its
// plugin's controller first (ValidateVolumeCapabilities), as Nomad does.
func (s *Server) volumeRegister(w http.ResponseWriter, r *http.Request) {
	var req api.CSIVolumeRegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Volumes) == 0 {
		http.Error(w, "invalid volume register request", http.StatusBadRequest)
		return
	}
	for _, vol := range req.Volumes {
		ns := vol.Namespace
		if ns == "" {
			ns = namespaceOf(r)
		}
		cc, done, err := s.controller(vol.PluginID)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		vreq := &csi.ValidateVolumeCapabilitiesRequest{VolumeId: vol.ExternalID}
		for _, c := range vol.RequestedCapabilities {
			vreq.VolumeCapabilities = append(vreq.VolumeCapabilities, capability(c))
		}
		resp, err := cc.ValidateVolumeCapabilities(r.Context(), vreq)
		done()
		switch {
		case err != nil:
			http.Error(w, fmt.Sprintf("controller validate volume: CSI.ControllerValidateVolume: %v", err), http.StatusInternalServerError)
			return
		case resp.GetConfirmed() == nil:
			http.Error(w, fmt.Sprintf("controller validate volume: volume capability not confirmed: %s", resp.GetMessage()), http.StatusInternalServerError)
			return
		}
		if s.Volume(ns, vol.ID) == nil {
			s.AddVolume(api.CSIVolumeListStub{ID: vol.ID, Name: vol.Name, ExternalID: vol.ExternalID, Namespace: ns, PluginID: vol.PluginID, Schedulable: true})
			s.mu.Lock()
			if s.volExtra == nil {
				s.volExtra = map[string]*api.CSIVolume{}
			}
			s.volExtra[key(ns, vol.ID)] = &api.CSIVolume{RequestedCapabilities: vol.RequestedCapabilities}
			s.mu.Unlock()
		}
	}
	s.reply(w, api.CSIVolumeRegisterResponse{})
}

// capability is a Nomad volume capability as CSI says it.
func capability(c *api.CSIVolumeCapability) *csi.VolumeCapability {
	mode := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	switch c.AccessMode {
	case api.CSIVolumeAccessModeMultiNodeMultiWriter:
		mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case api.CSIVolumeAccessModeSingleNodeReader:
		mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	}
	vc := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if c.AttachmentMode == api.CSIVolumeAttachmentModeBlockDevice {
		vc.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		vc.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	}
	return vc
}

func (s *Server) volumeDeregister(w http.ResponseWriter, r *http.Request) {
	if !s.deregisterVolume(namespaceOf(r), r.PathValue("id")) {
		http.Error(w, "volume not found", http.StatusBadRequest)
		return
	}
	s.reply(w, nil)
}

func (s *Server) deregisterVolume(ns, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := s.findVolume(ns, id)
	if i < 0 {
		return false
	}
	s.volumes = slices.Delete(s.volumes, i, i+1)
	delete(s.volExtra, key(ns, id))
	s.index++
	return true
}

// missingVolume names a CSI volume a task group mounts that namespace ns
// does not hold, or "".
func (s *Server) missingVolume(ns string, tg *api.TaskGroup) string {
	for _, v := range tg.Volumes {
		if v.Type == "csi" {
			if _, got := s.findVolume(ns, v.Source); got == nil {
				return v.Source
			}
		}
	}
	return ""
}
