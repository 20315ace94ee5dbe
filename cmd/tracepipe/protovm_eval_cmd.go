package main

import "github.com/spf13/cobra"

func newProtoVMEvalCmd() *cobra.Command { return &cobra.Command{Use: "eval", Hidden: true} }
