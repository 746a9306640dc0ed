// Package sharedcomponent shares one component between the instances the
// Collector creates for each signal of one configuration: started once, its
// start error returned to every sharer, shut down when the last sharer that
// started shuts down. It has the semantics of core's internal/sharedcomponent
// (not importable) except that core stops on the first Shutdown.
package sharedcomponent // import "github.com/postgrescopy/postgrescopy/internal/sharedcomponent"
