package main

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/perfettoipc"
)

const perfettoSourcesLong = `List the data sources Perfetto producers (SDK apps, traced_probes)
registered with a running tracepipe serving --perfetto (or with any
traced): it asks the consumer socket, as "perfetto --query" does. A name
listed here can be used in data_sources[i].name.

The socket is --socket, else PERFETTO_CONSUMER_SOCK_NAME, else Perfetto's
default.`

// newPerfettoSourcesCmd builds `tracepipe perfetto-sources`, the sibling of
// `tracepipe plugins` for Perfetto producers.
func newPerfettoSourcesCmd() *cobra.Command {
	var sock string
	var timeout time.Duration
	c := &cobra.Command{
		Use:     "perfetto-sources [--socket PATH]",
		Short:   "List the data sources connected Perfetto producers registered",
		Long:    perfettoSourcesLong,
		Example: `  tracepipe perfetto-sources --socket /tmp/perfetto-consumer`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sock == "" {
				sock = config.PerfettoConsumerSocket()
			}
			c, err := perfettoipc.DialService(sock, "ConsumerPort", timeout)
			if err != nil {
				return err
			}
			defer c.Close()
			st, err := c.QueryServiceState()
			if err != nil {
				return err
			}
			return printPerfettoSources(cmd.OutOrStdout(), sock, st)
		},
	}
	c.Flags().StringVar(&sock, "socket", "", "the consumer socket (default: PERFETTO_CONSUMER_SOCK_NAME, else Perfetto's)")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "bound on connecting and on each reply")
	return c
}

// printPerfettoSources lists each data source name with the producers
// (name, pid, uid) that registered it, sorted by name.
func printPerfettoSources(w io.Writer, sock string, st *perfettoipc.TracingServiceState) error {
	producers := map[int32]*perfettoipc.TracingServiceState_Producer{}
	for _, p := range st.GetProducers() {
		producers[p.GetId()] = p
	}
	byName := map[string][]string{}
	for _, d := range st.GetDataSources() {
		name := d.GetDsDescriptor().GetName()
		who := fmt.Sprintf("producer %d", d.GetProducerId())
		if p := producers[d.GetProducerId()]; p != nil {
			who = fmt.Sprintf("%s (pid %d, uid %d)", p.GetName(), p.GetPid(), p.GetUid())
		}
		byName[name] = append(byName[name], who)
	}
	if len(byName) == 0 {
		_, err := fmt.Fprintf(w, "no Perfetto producer registered a data source at %s (%d producers connected)\n", sock, len(st.GetProducers()))
		return err
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "%s: %d producers, %d data sources\n", sock, len(st.GetProducers()), len(names))
	for _, n := range names {
		fmt.Fprintf(w, "  %s\n", n)
		for _, who := range byName[n] {
			fmt.Fprintf(w, "    %s\n", who)
		}
	}
	return nil
}
