package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
)

// NewCommand is the sample apiserver's command line. Invalid options make it
// fail, listing every problem, before anything starts or binds a port.
func NewCommand(ctx context.Context, out io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "sample-apiserver",
		Short: "An aggregated apiserver for demo.watchkeeper.io whose watch cache is watchkeeper",
		Long: `sample-apiserver serves the demo.watchkeeper.io API group (widgets, namespaced; gadgets,
cluster-scoped) with watchkeeper's watch cache in front of etcd.

Standalone (no --kubeconfig, not in a cluster): it starts an embedded etcd under --data-dir
unless --etcd-servers is given, serves TLS with a self-signed certificate, and writes an
admin kubeconfig. Aggregated (--kubeconfig, or in a cluster): delegated authentication and
authorization against the cluster, registered through an APIService.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.bindAddressSet = cmd.Flags().Changed("bind-address")
			o.Complete()
			if errs := o.Validate(); len(errs) > 0 {
				return invalidOptions(errs)
			}
			// At -v=0 the output drops the generic server's info lines
			// about its own orderly shutdown (logging.go): Ctrl-C says one
			// line. Warnings and errors, and everything at -v=1, show.
			var logOut *logsapi.LoggingOptions
			if o.Logs.Verbosity == 0 {
				stopping := cmd.Context().Done()
				logOut = &logsapi.LoggingOptions{
					ErrorStream: shutdownQuiet{out: os.Stderr, stopping: stopping},
					InfoStream:  shutdownQuiet{out: os.Stdout, stopping: stopping},
				}
			}
			if err := logsapi.ValidateAndApplyWithOptions(o.Logs, logOut, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			return Run(cmd.Context(), o, out)
		},
	}
	cmd.SetContext(ctx)
	fss := o.Flags()
	fs := cmd.Flags()
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

// invalidOptions lists every problem, one a line.
func invalidOptions(errs []error) error {
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = "  - " + err.Error()
	}
	return fmt.Errorf("invalid options:\n%s", strings.Join(lines, "\n"))
}
