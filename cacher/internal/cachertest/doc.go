// Package cachertest is what the cache's tests share, as upstream keeps its
// cacher/testing: a fake storage.Interface whose lists and watches a test
// drives by hand (FakeStorage, FakeWatch), the test pods and their
// attributes, and helpers that read watches and wait for goroutines. Only
// tests import it. The test cacher itself stays in package cacher's tests,
// since it builds a Cacher from the package's unexported parts.
package cachertest
