// Command render prints a kustomization as one YAML stream: `go run ./hack/render manifests`.
package main

import (
	"fmt"
	"os"

	"github.com/gleaner-dev/gleaner/internal/manifests"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: render KUSTOMIZATION_DIR")
		os.Exit(2)
	}
	out, err := manifests.Render(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}
