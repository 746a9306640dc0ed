package coord

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kind is what a Redis error means for the exporter. Classify is the one
// place that recognizes Redis errors, with go-redis's own helpers.
type Kind int

// Kinds of Redis errors.
const (
	KindOther Kind = iota
	// KindAuth: the credentials were refused (NOAUTH, WRONGPASS).
	KindAuth
	// KindPermission: an ACL refuses a command (NOPERM), also inside a
	// script.
	KindPermission
	// KindOOM: Redis is at maxmemory and refuses writes.
	KindOOM
	// KindUnknownMaster: no sentinel knows redis::sentinel::master_name.
	KindUnknownMaster
	// KindNoSentinel: no sentinel answered (all down, or refused).
	KindNoSentinel
	// KindClusterDown: the cluster does not serve the slot (CLUSTERDOWN).
	KindClusterDown
	// KindRedirect: the slot is served by another node (MOVED, ASK).
	KindRedirect
	// KindNoGroup: the stream or its consumer group is missing.
	KindNoGroup
	// KindBusyGroup: the group exists already (creating it is then done).
	KindBusyGroup
	// KindUnavailable: the server cannot serve now (LOADING, READONLY after
	// a failover, MASTERDOWN, TRYAGAIN, too many clients).
	KindUnavailable
)

// Classify says what err, from a go-redis call, means.
func Classify(err error) Kind {
	if err == nil {
		return KindOther
	}
	if _, ok := redis.IsMovedError(err); ok {
		return KindRedirect
	}
	if _, ok := redis.IsAskError(err); ok {
		return KindRedirect
	}
	switch {
	case redis.IsAuthError(err), redis.HasErrorPrefix(err, "invalid password"),
		redis.HasErrorPrefix(err, "AUTH") && strings.Contains(err.Error(), "without any password configured"):
		return KindAuth
	case redis.IsPermissionError(err), redis.HasErrorPrefix(err, "Error running script") && strings.Contains(err.Error(), "can't run this command"):
		return KindPermission
	case redis.IsOOMError(err), discardedFor(err, "OOM "):
		return KindOOM
	case redis.IsClusterDownError(err):
		return KindClusterDown
	case redis.HasErrorPrefix(err, "NOGROUP"):
		return KindNoGroup
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		return KindBusyGroup
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsMasterDownError(err),
		redis.IsTryAgainError(err), redis.IsMaxClientsError(err):
		return KindUnavailable
	}
	// go-redis's sentinel failover wraps what each sentinel answered; the
	// sentinels answer a nil reply for a name none of them monitors.
	if strings.Contains(err.Error(), "all sentinels specified in configuration are unreachable") {
		if errors.Is(err, redis.Nil) {
			return KindUnknownMaster
		}
		return KindNoSentinel
	}
	return KindOther
}

// IsNoGroup reports whether err says the stream or its consumer group is
// missing: Redis lost them (or they were deleted), and Ensure must recreate
// them.
func IsNoGroup(err error) bool { return Classify(err) == KindNoGroup }

// IsReply reports whether err is an error reply from Redis (the state of a
// key, a refusal), not a connection failure. A sentinel failover error wraps
// the sentinels' replies, but no data node answered: it is not one.
func IsReply(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	switch Classify(err) {
	case KindUnknownMaster, KindNoSentinel:
		return false
	}
	return true
}

// pipelineFailed is the error of a pipeline that failed as a whole, before
// any command had an answer (go-redis then leaves every command without an
// error and without a value: a sentinel that names no primary, a closed
// client); nil when each command has its own answer to check.
func pipelineFailed(err error, cmds []redis.Cmder) error {
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return nil
		}
	}
	return err
}

// IsNil reports redis.Nil, "no such data": not a sentinel's nil for an
// unknown master_name, which go-redis wraps in its failover error.
func IsNil(err error) bool {
	return errors.Is(err, redis.Nil) && Classify(err) != KindUnknownMaster
}
