package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// agentScrapeTimeout bounds one scrape of the agent: a scrape of
// devplumbctl metrics must not hang on it.
const agentScrapeTimeout = 5 * time.Second

// agentPrefix names the agent's process metrics.
const agentPrefix = "devplumb_agent_"

// agentGatherer gathers the node agent's metrics from its root-only unix
// socket (devplumb-agent --metrics-socket), so they are served, secured,
// with this daemon's: the agent links no API server library. An agent that
// does not answer (not running, restarting) adds nothing to the scrape.
func agentGatherer(socket string, log *slog.Logger) prometheus.Gatherer {
	client := &http.Client{Timeout: agentScrapeTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := scrapeAgent(client)
		if err != nil {
			log.Debug("node agent's metrics not scraped", "socket", socket, "err", err)
			return nil, nil
		}
		return fams, nil
	})
}

func scrapeAgent(client *http.Client) ([]*dto.MetricFamily, error) {
	resp, err := client.Get("http://agent/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	fams := make([]*dto.MetricFamily, 0, len(byName))
	for name, f := range byName {
		// The agent's process is not this one: its Go and process metrics
		// get the agent's prefix (devplumb_agent_process_resident_memory_bytes).
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			f.Name = proto.String(agentPrefix + name)
		}
		fams = append(fams, f)
	}
	return fams, nil
}
