package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"
	"gopkg.in/yaml.v3"
)

// webSettings is what the web configuration file (--web-config) sets for
// the HTTP endpoint.
type webSettings struct {
	tls        bool // it serves TLS
	basicAuth  bool // it asks for a password
	clientCert bool // it asks for a client certificate it verifies
}

// readWebConfig reads what the web configuration file sets, once the
// exporter toolkit has found it valid (web.Validate): the toolkit serves
// plain HTTP when the file has no TLS settings, basic auth included.
func readWebConfig(path string) (webSettings, error) {
	if path == "" {
		return webSettings{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return webSettings{}, err
	}
	var c web.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return webSettings{}, err
	}
	c.TLSConfig.SetDirectory(filepath.Dir(path))
	_, tlsErr := web.ConfigToTLSConfig(&c.TLSConfig)
	return webSettings{
		tls:        tlsErr == nil,
		basicAuth:  len(c.Users) > 0,
		clientCert: tlsErr == nil && c.TLSConfig.ClientAuth == "RequireAndVerifyClientCert",
	}, nil
}

// exposed is the warning for an endpoint that listens beyond the
// loopback and lets anyone in, or "".
func exposed(addr net.Addr, ws webSettings) string {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		host = addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	if ws.basicAuth || ws.clientCert {
		return ""
	}
	return fmt.Sprintf("the HTTP endpoint listens on %s, beyond the loopback, with no authentication: anyone who reaches it reads every protected plan's metrics and decodes payloads (plans) through /codec; give it --web-config with tls_server_config and basic_auth_users, or listen on 127.0.0.1", addr)
}

// allowedHosts are the host names the endpoint listening on addr answers
// to: localhost, the loopback addresses (checked apart), its own address
// (each of the machine's addresses when it listens on all of them) and
// those given with --allowed-host.
func allowedHosts(addr net.Addr, extra []string) []string {
	hosts := []string{"localhost"}
	host, _, err := net.SplitHostPort(addr.String())
	if err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			if as, err := net.InterfaceAddrs(); err == nil {
				for _, a := range as {
					if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
						hosts = append(hosts, n.IP.String())
					}
				}
			}
		} else {
			hosts = append(hosts, host)
		}
	}
	for _, h := range extra {
		hosts = append(hosts, strings.ToLower(strings.Trim(h, "[]")))
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// checkHost answers only requests for one of hosts or a loopback
// address, as drctl ui does: a web page elsewhere whose name is rebound
// to the worker's address sends its own name, and gets 421 instead of
// the metrics or the codec.
func checkHost(h http.Handler, hosts []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		host = strings.ToLower(strings.Trim(host, "[]"))
		if ip := net.ParseIP(host); ip != nil {
			if ip.IsLoopback() {
				h.ServeHTTP(w, r)
				return
			}
			host = ip.String()
		}
		if !slices.Contains(hosts, host) {
			http.Error(w, "unknown host name "+r.Host+": the worker answers to "+strings.Join(hosts, ", ")+" and the loopback (--allowed-host adds a name)", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
