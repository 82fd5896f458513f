package options

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// bytesValue is a flag of bytes written as a Kubernetes quantity (512Mi,
// 2G, 1000000), as a container's memory limit is.
type bytesValue struct{ n *int64 }

func (v bytesValue) Type() string { return "quantity" }

func (v bytesValue) String() string {
	if v.n == nil {
		return "0"
	}
	return resource.NewQuantity(*v.n, resource.BinarySI).String()
}

func (v bytesValue) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

// parseBytes reads a quantity of bytes; a fraction of a byte is an error,
// not rounded.
func parseBytes(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("not a quantity of bytes (512Mi, 2G): %w", err)
	}
	n, ok := q.AsInt64()
	if !ok {
		return 0, fmt.Errorf("%s is not a whole number of bytes that fits in 64 bits", s)
	}
	return n, nil
}
