// Package aliasing tells whether two values share memory rather than hold
// equal copies: what the tests of the cache's version sharing
// (cacher/internal/versions, the cache's unchanged labels and fields) check.
package aliasing

import (
	"reflect"
	"unsafe"
)

// Map is whether a and b are one map, not two with the same content.
func Map[M ~map[K]V, K comparable, V any](a, b M) bool {
	return a != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// Slice is whether a and b start at the same element of one array.
func Slice[T any](a, b []T) bool { return len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b) }

// String is whether a and b are the same bytes in memory.
func String(a, b string) bool { return len(a) > 0 && unsafe.StringData(a) == unsafe.StringData(b) }
