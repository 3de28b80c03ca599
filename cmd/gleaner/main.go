// Command gleaner is Gleaner's command-line tool for users and operators.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gleaner-dev/gleaner/pkg/version"
)

func main() {
	root := &cobra.Command{
		Use:           "gleaner",
		Short:         "Lend idle inference GPUs to best-effort jobs",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.String())
		},
	})
	root.AddCommand(newProbeCommand())
	root.AddCommand(newSimulateCommand())
	root.AddCommand(newVLLMSimCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gleaner:", err)
		os.Exit(1)
	}
}
