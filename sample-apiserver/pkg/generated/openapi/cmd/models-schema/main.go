// Command models-schema prints the OpenAPI v2 definitions of the demo API
// (those of zz_generated.openapi.go) as one Swagger JSON document.
// hack/update-codegen.sh feeds it to applyconfiguration-gen, which embeds
// the schemas the apply configurations' Extract functions need.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/openapi"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "models-schema: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ref := func(name string) spec.Ref {
		return spec.MustCreateRef("#/definitions/" + name)
	}
	defs := openapi.GetOpenAPIDefinitions(ref)
	schemas := make(map[string]spec.Schema, len(defs))
	for name, def := range defs {
		// A definition may carry a separate v2 schema for types whose v3
		// schema v2 cannot express; the output is v2, so prefer it.
		if v2, ok := def.Schema.Extensions[common.ExtensionV2Schema].(spec.Schema); ok {
			schemas[name] = v2
			continue
		}
		schemas[name] = def.Schema
	}
	data, err := json.Marshal(&spec.Swagger{
		SwaggerProps: spec.SwaggerProps{
			Swagger:     "2.0",
			Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "demo.watchkeeper.io", Version: "unversioned"}},
			Definitions: schemas,
		},
	})
	if err != nil {
		return fmt.Errorf("serializing definitions: %w", err)
	}
	_, err = os.Stdout.Write(data)
	return err
}
