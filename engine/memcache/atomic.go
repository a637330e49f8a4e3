package memcache

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/sluicehq/sluice/engine"
)

// atomicKind: operations applied one by one, each atomic in memcached,
// before Exec reads and queues the plain increments. The reference's
// increments are a read now and an incr later, which is not atomic; a
// lease's reservation must be, since its block is the range of counts just
// below what the store answers.
func atomicKind(k engine.OpKind) bool {
	switch k {
	case engine.OpTokenBucket, engine.OpTokenTake, engine.OpReserve, engine.OpRelease:
		return true
	}
	return false
}

// atomicOps applies the batch's atomic operations, in order.
func (b *Backend) atomicOps(ctx context.Context, batch []engine.CounterOp) error {
	for i := range batch {
		op := &batch[i]
		var err error
		switch op.Kind {
		case engine.OpTokenBucket, engine.OpTokenTake:
			if err = b.bucketStep(ctx, op); err != nil {
				return fmt.Errorf("memcache: token bucket %s: %w", keyRef(op.Key), err)
			}
		case engine.OpReserve:
			err = b.reserve(op)
		case engine.OpRelease:
			err = b.release(op)
		}
		if err != nil {
			return fmt.Errorf("memcache: %w", err)
		}
	}
	return nil
}

// reserve is an atomic add: incr, or add when the counter is missing (incr
// again when another writer added it first). After is memcached's answer.
func (b *Backend) reserve(op *engine.CounterOp) error {
	if op.TTL <= 0 {
		return fmt.Errorf("reserve %s: TTL %s must be positive (0 never expires)", keyRef(op.Key), op.TTL)
	}
	for attempt := 0; attempt < 2; attempt++ {
		n, err := b.client.Increment(op.Key, op.Hits)
		b.record(err)
		if err == nil {
			op.After = n
			return nil
		}
		if !errors.Is(err, memcache.ErrCacheMiss) {
			return fmt.Errorf("incr %s: %w", keyRef(op.Key), err)
		}
		err = b.client.Add(&memcache.Item{Key: op.Key, Value: []byte(strconv.FormatUint(op.Hits, 10)), Expiration: b.expiration(op.TTL)})
		b.record(err)
		if err == nil {
			op.After = op.Hits
			return nil
		}
		if !errors.Is(err, memcache.ErrNotStored) {
			return fmt.Errorf("add %s: %w", keyRef(op.Key), err)
		}
	}
	return fmt.Errorf("reserve %s: the counter was created and removed while reserving", keyRef(op.Key))
}

// release is memcached's decr, which stops at 0 and creates nothing.
func (b *Backend) release(op *engine.CounterOp) error {
	n, err := b.client.Decrement(op.Key, op.Hits)
	b.record(err)
	switch {
	case err == nil:
		op.After = n
	case errors.Is(err, memcache.ErrCacheMiss):
		op.After = 0
	default:
		return fmt.Errorf("decr %s: %w", keyRef(op.Key), err)
	}
	return nil
}
