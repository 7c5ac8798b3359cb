package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"gopkg.in/yaml.v3"
)

// connFlags are the connection flags, named and read as the temporal CLI
// names them. They override the environment (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*), which overrides
// the profile of the environment configuration file (--profile,
// TEMPORAL_PROFILE) and the environment of the CLI's env file (--env).
type connFlags struct {
	address, namespace, apiKey        string
	tlsCert, tlsKey, tlsCA, tlsServer string
	tls                               bool
	profile, env, envFile             string
}

func (f *connFlags) add(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&f.address, "address", "", "Temporal frontend host:port (default: TEMPORAL_ADDRESS or localhost:7233)")
	fl.StringVarP(&f.namespace, "namespace", "n", "", "Temporal namespace (default: TEMPORAL_NAMESPACE or default)")
	fl.StringVar(&f.apiKey, "api-key", "", "API key for requests (default: TEMPORAL_API_KEY); turns TLS on")
	fl.BoolVar(&f.tls, "tls", false, "connect with TLS (implied by the other --tls-* flags and --api-key)")
	fl.StringVar(&f.tlsCert, "tls-cert-path", "", "client certificate for mutual TLS")
	fl.StringVar(&f.tlsKey, "tls-key-path", "", "client private key for mutual TLS")
	fl.StringVar(&f.tlsCA, "tls-ca-path", "", "CA certificates that sign the server's certificate")
	fl.StringVar(&f.tlsServer, "tls-server-name", "", "server name to verify the server's certificate against")
	fl.StringVar(&f.profile, "profile", "", "profile of the environment configuration file (default: TEMPORAL_PROFILE or default)")
	fl.StringVar(&f.env, "env", "", "environment of the temporal CLI's env file to read the connection from (default: TEMPORAL_ENV)")
	fl.StringVar(&f.envFile, "env-file", "", "the temporal CLI's env file (default $HOME/.config/temporalio/temporal.yaml)")
}

// options builds the client options: the profile and the environment
// variables first, then the env file's environment, then the flags.
func (f *connFlags) options() (client.Options, error) {
	opts, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{ConfigFileProfile: f.profile})
	if err != nil {
		return opts, badInput("read the Temporal client configuration (--profile, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE): %v", err)
	}
	if err := f.applyEnv(); err != nil {
		return opts, err
	}
	if f.address != "" {
		opts.HostPort = f.address
	}
	if f.namespace != "" {
		opts.Namespace = f.namespace
	}
	if f.apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(f.apiKey)
		f.tls = true
	}
	if !f.tls && f.tlsCert == "" && f.tlsKey == "" && f.tlsCA == "" && f.tlsServer == "" {
		return opts, nil
	}
	cfg := opts.ConnectionOptions.TLS
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return opts, badInput("give both --tls-cert-path and --tls-key-path, or neither")
	}
	if f.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return opts, badInput("--tls-cert-path %s, --tls-key-path %s: %v", f.tlsCert, f.tlsKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return opts, badInput("--tls-ca-path: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return opts, badInput("--tls-ca-path %s: no PEM certificate in it", f.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if f.tlsServer != "" {
		cfg.ServerName = f.tlsServer
	}
	opts.ConnectionOptions.TLS = cfg
	return opts, nil
}

// applyEnv fills the flags left empty from an environment of the temporal
// CLI's env file (env: {NAME: {address: …, namespace: …, tls-cert-path: …}}).
// The default environment of a missing file is no error.
func (f *connFlags) applyEnv() error {
	name, asked := f.env, f.env != ""
	if name == "" {
		name, asked = os.Getenv("TEMPORAL_ENV"), os.Getenv("TEMPORAL_ENV") != ""
	}
	if name == "" {
		name = "default"
	}
	file := f.envFile
	if file == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		file = filepath.Join(home, ".config", "temporalio", "temporal.yaml")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		if asked || f.envFile != "" {
			return badInput("--env %s: read the env file: %v", name, err)
		}
		return nil
	}
	var doc struct {
		Env map[string]map[string]string `yaml:"env"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return badInput("--env-file %s: %v", file, err)
	}
	env, ok := doc.Env[name]
	if !ok {
		if asked {
			return badInput("--env %s: the env file %s has no such environment", name, file)
		}
		return nil
	}
	for key, dst := range map[string]*string{"address": &f.address, "namespace": &f.namespace, "api-key": &f.apiKey,
		"tls-cert-path": &f.tlsCert, "tls-key-path": &f.tlsKey, "tls-ca-path": &f.tlsCA, "tls-server-name": &f.tlsServer} {
		if v := env[key]; v != "" && *dst == "" {
			*dst = v
		}
	}
	if env["tls"] == "true" {
		f.tls = true
	}
	return nil
}
