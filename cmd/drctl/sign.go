package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// DefaultSignatureValidity is how long a signature drctl makes is good
// unless told otherwise (plan sign --valid-for, --sign-valid-for): a
// signature read from a history stops being of use by then, even to a
// worker that has not seen the plan's newer version.
const DefaultSignatureValidity = 30 * 24 * time.Hour

// identity is who acts: --by, else user@host.
func (a *app) identity() string {
	if a.by != "" {
		return a.by
	}
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return name
	}
	return name + "@" + host
}

// origin is what an action started from file carries: the plan's
// signature and who starts it. With --sign-key drctl signs the plan as
// it submits it; otherwise it sends the signature file beside the plan
// (FILE.sig, from drctl plan sign), after checking that it still matches
// the plan. Without either the plan goes unsigned, and a worker refuses
// it unless it runs with --allow-unsigned-plans.
func (a *app) origin(file string, p *plans.Plan) (workflows.Origin, error) {
	o := workflows.Origin{By: a.identity()}
	if a.signKey != "" {
		key, err := plans.ReadPrivateKey(a.signKey)
		if err != nil {
			return o, badInput("--sign-key: %v", err)
		}
		if a.signValidFor < 0 {
			return o, badInput("--sign-valid-for %v: want a positive duration, or 0 for no end", a.signValidFor)
		}
		o.Signature, err = plans.Sign(p, key, time.Now(), a.signValidFor)
		if err != nil {
			return o, failed("sign plan %q: %v", p.Metadata.Name, err)
		}
		return o, nil
	}
	sigFile := plans.SignatureFile(file)
	sig, err := plans.ReadSignature(sigFile)
	if errors.Is(err, fs.ErrNotExist) {
		if !a.json() {
			fmt.Fprintf(a.stderr, "note: plan %q is not signed (no %s, no --sign-key); a worker runs it only with --allow-unsigned-plans\n", p.Metadata.Name, sigFile)
		}
		return o, nil
	}
	if err != nil {
		return o, badInput("%v", err)
	}
	if err := plans.Verify(p, sig, []ed25519.PublicKey{sig.Key}, time.Now()); err != nil {
		return o, badInput("%s does not fit plan %s: %v; sign the plan again (drctl plan sign %s --key KEY)", sigFile, file, err, file)
	}
	o.Signature = sig
	return o, nil
}

// signCommands are plan keygen and plan sign.
func (a *app) signCommands() []*cobra.Command {
	keygen := &cobra.Command{
		Use:   "keygen NAME",
		Short: "Make an ed25519 key pair for signing plans: NAME.key (keep it secret) and NAME.pub (for the workers' --trusted-plan-key)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pub, key, err := plans.GenerateKey()
			if err != nil {
				return failed("generate a key: %v", err)
			}
			kb, err := plans.EncodePrivateKey(key)
			if err != nil {
				return failed("%v", err)
			}
			pb, err := plans.EncodePublicKey(pub)
			if err != nil {
				return failed("%v", err)
			}
			for _, f := range []struct {
				path string
				data []byte
				mode os.FileMode
			}{{args[0] + ".key", kb, 0o600}, {args[0] + ".pub", pb, 0o644}} {
				w, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
				if err != nil {
					return badInput("%v (drctl never overwrites a key)", err)
				}
				_, err = w.Write(f.data)
				if cerr := w.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return failed("write %s: %v", f.path, err)
				}
			}
			if a.json() {
				writeJSON(a.stdout, map[string]string{"key": args[0] + ".key", "publicKey": args[0] + ".pub", "keyId": plans.KeyID(pub)})
				return nil
			}
			fmt.Fprintf(a.stdout, "key %s: signing key %s.key, public key %s.pub (give it to the workers with --trusted-plan-key)\n", plans.KeyID(pub), args[0], args[0])
			return nil
		},
	}
	var keyFile string
	var validFor time.Duration
	sign := &cobra.Command{
		Use:   "sign FILE... --key KEY",
		Short: "Sign plans: write FILE.sig beside each, which drctl sends with the plan's actions",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile == "" {
				keyFile = a.signKey
			}
			if keyFile == "" {
				return badInput("give the signing key with --key KEY (drctl plan keygen makes one)")
			}
			if validFor < 0 {
				return badInput("--valid-for %v: want a positive duration, or 0 for no end", validFor)
			}
			key, err := plans.ReadPrivateKey(keyFile)
			if err != nil {
				return badInput("%v", err)
			}
			type signed struct {
				File      string    `json:"file"`
				Plan      string    `json:"plan"`
				Signature string    `json:"signature"`
				KeyID     string    `json:"keyId"`
				ExpiresAt time.Time `json:"expiresAt,omitzero"`
			}
			var out []signed
			for _, f := range args {
				p, err := loadPlan(f)
				if err != nil {
					return err
				}
				sig, err := plans.Sign(p, key, time.Now(), validFor)
				if err != nil {
					return failed("sign %s: %v", f, err)
				}
				if err := plans.WriteSignature(plans.SignatureFile(f), sig); err != nil {
					return failed("write the signature of %s: %v", f, err)
				}
				out = append(out, signed{f, p.Metadata.Name, plans.SignatureFile(f), sig.KeyID(), sig.ExpiresAt})
			}
			if a.json() {
				writeJSON(a.stdout, out)
				return nil
			}
			for _, s := range out {
				until := ""
				if !s.ExpiresAt.IsZero() {
					until = ", good until " + s.ExpiresAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(a.stdout, "signed plan %q with key %s: %s%s\n", s.Plan, s.KeyID, s.Signature, until)
			}
			return nil
		},
	}
	sign.Flags().StringVar(&keyFile, "key", "", "the ed25519 signing key (PEM; default --sign-key)")
	sign.Flags().DurationVar(&validFor, "valid-for", DefaultSignatureValidity, "how long the signature is good; 0 for no end (an old version of the plan then stays signed until a worker sees a newer one)")
	return []*cobra.Command{keygen, sign}
}
