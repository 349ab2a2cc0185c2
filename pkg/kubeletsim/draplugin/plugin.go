package draplugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet's bounds (pkg/kubelet/pluginmanager/operationexecutor and
// pkg/kubelet/cm/dra/plugin).
const (
	dialTimeout   = 10 * time.Second
	notifyTimeout = 5 * time.Second
	// CallTimeout bounds each NodePrepareResources / NodeUnprepareResources.
	CallTimeout = 45 * time.Second
)

// servicesSupported are the DRA gRPC services the kubelets 1.34 to 1.37 speak, most
// recent first.
var servicesSupported = []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}

// errRejected marks a registration refused for good (wrong type, versions):
// the plugin was told, trying again would not change the answer.
var errRejected = errors.New("registration rejected")

// PluginInfo describes one registered DRA plugin.
type PluginInfo struct {
	Driver             string `json:"driver"`
	Endpoint           string `json:"endpoint"`
	Service            string `json:"service"` // the DRA gRPC service chosen, e.g. v1.DRAPlugin
	RegistrationSocket string `json:"registrationSocket"`
}

// Plugin is a registered DRA plugin and its connection.
type Plugin struct {
	PluginInfo
	conn *grpc.ClientConn
}

func (p *Plugin) close() { p.conn.Close() }

// register does what the kubelet's operation generator does for one socket:
// GetInfo, check, connect to the endpoint, NotifyRegistrationStatus.
func (m *Manager) register(socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial registration socket %s: %w", socket, err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(m.ctx, dialTimeout)
	defer cancel()
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("GetInfo at registration socket %s: %w", socket, err)
	}
	p, err := m.validate(socket, info)
	if err != nil {
		m.log.Error("DRA plugin registration rejected", "socket", socket, "driver", info.GetName(), "err", err)
		if nerr := notify(m.ctx, client, false, err.Error()); nerr != nil {
			return fmt.Errorf("%w: %w; telling the plugin: %w", errRejected, err, nerr)
		}
		return fmt.Errorf("%w: %w", errRejected, err)
	}
	if err := notify(m.ctx, client, true, ""); err != nil {
		p.close()
		return fmt.Errorf("NotifyRegistrationStatus at %s: %w", socket, err)
	}
	m.add(p)
	m.log.Info("Registered DRA plugin", "driver", p.Driver, "endpoint", p.Endpoint, "service", p.Service, "socket", socket)
	return nil
}

// validate checks the plugin's answer like the kubelet and connects to its
// DRA endpoint. Only DRA plugins are handled: nodesim has no CSI.
func (m *Manager) validate(socket string, info *registerapi.PluginInfo) (*Plugin, error) {
	if info.GetType() != registerapi.DRAPlugin {
		return nil, fmt.Errorf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.GetType(), socket)
	}
	if info.GetName() == "" {
		return nil, errors.New("RegisterPlugin error -- plugin validation failed with err: DRA driver name is empty")
	}
	endpoint := info.GetEndpoint()
	if endpoint == "" {
		endpoint = socket
	}
	if !filepath.IsAbs(endpoint) {
		return nil, fmt.Errorf("RegisterPlugin error -- plugin validation failed with err: endpoint %q of DRA driver plugin %s is not an absolute path", endpoint, info.GetName())
	}
	service, err := chooseService(info.GetSupportedVersions())
	if err != nil {
		return nil, fmt.Errorf("RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w",
			info.GetName(), endpoint, err)
	}
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial DRA driver plugin %s at %s: %w", info.GetName(), endpoint, err)
	}
	return &Plugin{PluginInfo: PluginInfo{Driver: info.GetName(), Endpoint: endpoint, Service: service,
		RegistrationSocket: socket}, conn: conn}, nil
}

// chooseService picks the first service the plugin lists that the kubelet
// speaks, as the kubelet does.
func chooseService(offered []string) (string, error) {
	if len(offered) == 0 {
		return "", errors.New("empty list of supported gRPC services (aka supported versions)")
	}
	for _, s := range offered {
		if slices.Contains(servicesSupported, s) {
			return s, nil
		}
	}
	return "", fmt.Errorf("none of services supported by the plugin (%q) are supported by the kubelet (%q)", offered, servicesSupported)
}

func notify(ctx context.Context, client registerapi.RegistrationClient, ok bool, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	_, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: ok, Error: msg})
	return err
}

// client speaks the chosen service, converting v1beta1 to v1 as the kubelet does.
func (p *Plugin) client() (drapbv1.DRAPluginClient, error) {
	switch p.Service {
	case drapbv1.DRAPluginService:
		return drapbv1.NewDRAPluginClient(p.conn), nil
	case drapbv1beta1.DRAPluginService:
		return drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(p.conn)}, nil
	}
	return nil, fmt.Errorf("internal error: unsupported DRA service %q", p.Service)
}

// Prepare calls NodePrepareResources for claims and checks the answer like
// the kubelet: a result for every claim asked, none for others, no error.
func (p *Plugin) Prepare(ctx context.Context, claims []*drapbv1.Claim) (map[string]*drapbv1.NodePrepareResourceResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := c.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		return nil, fmt.Errorf("DRA driver %s NodePrepareResources: %w", p.Driver, err)
	}
	for uid, r := range resp.GetClaims() {
		claim := find(claims, uid)
		if claim == nil {
			return nil, fmt.Errorf("DRA driver %s NodePrepareResources returned result for unknown claim UID %s", p.Driver, uid)
		}
		if r.GetError() != "" {
			return nil, fmt.Errorf("DRA driver %s NodePrepareResources failed for ResourceClaim %s: %s", p.Driver, claim.Name, r.GetError())
		}
	}
	if n := len(claims) - len(resp.GetClaims()); n != 0 {
		return nil, fmt.Errorf("DRA driver %s NodePrepareResources skipped %d ResourceClaims", p.Driver, n)
	}
	return resp.GetClaims(), nil
}

// Unprepare calls NodeUnprepareResources for claims; an error for any claim
// is an error, as for the kubelet (which then tries again).
func (p *Plugin) Unprepare(ctx context.Context, claims []*drapbv1.Claim) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := c.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		return fmt.Errorf("DRA driver %s NodeUnprepareResources: %w", p.Driver, err)
	}
	for uid, r := range resp.GetClaims() {
		claim := find(claims, uid)
		if claim == nil {
			return fmt.Errorf("DRA driver %s NodeUnprepareResources returned result for unknown claim UID %s", p.Driver, uid)
		}
		if r.GetError() != "" {
			return fmt.Errorf("DRA driver %s NodeUnprepareResources failed for ResourceClaim %s: %s", p.Driver, claim.Name, r.GetError())
		}
	}
	if n := len(claims) - len(resp.GetClaims()); n != 0 {
		return fmt.Errorf("DRA driver %s NodeUnprepareResources skipped %d ResourceClaims", p.Driver, n)
	}
	return nil
}

func find(claims []*drapbv1.Claim, uid string) *drapbv1.Claim {
	for _, c := range claims {
		if c.GetUid() == uid {
			return c
		}
	}
	return nil
}
