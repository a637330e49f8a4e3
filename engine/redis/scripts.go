package redis

import (
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
)

// The operations Redis has no single command for run as Lua scripts, each
// on one key (so they work on a cluster) and sent by EVALSHA in the same
// pipeline as the INCRBYs. Times are unix microseconds: every value stays
// below 2^53, exact in Lua's doubles, and '%d' writes a TAT without an
// exponent.

// bucketScript is one GCRA step, engine.TokenBucketStep in Lua: KEYS[1] holds
// the TAT; ARGV are now, interval, burst and hits; the key expires as
// engine.TokenBucketTTL says. It returns the TAT it found (0 when missing).
var bucketScript = goredis.NewScript(bucketLua)

const bucketLua = `
local v = redis.call('GET', KEYS[1])
local tat = 0
if v then tat = tonumber(v) or 0 end
local now, interval, burst, hits = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if hits > 0 and hits <= burst then
  local base = tat
  if now > base then base = now end
  local nxt = base + hits * interval
  if nxt - now <= burst * interval then
    redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX', math.floor((nxt - now) / 1000) + 60000)
  end
end
return tat
`

// takeScript is engine.TokenBucketTake in Lua: as many of hits tokens as
// the bucket holds. Same keys, arguments and answer as bucketScript.
var takeScript = goredis.NewScript(takeLua)

const takeLua = `
local v = redis.call('GET', KEYS[1])
local tat = 0
if v then tat = tonumber(v) or 0 end
local now, interval, burst, hits = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if interval > 0 and burst > 0 and hits > 0 then
  local base = tat
  if now > base then base = now end
  local room = now + burst * interval - base
  if room >= interval then
    local took = math.floor(room / interval)
    if took > hits then took = hits end
    local nxt = base + took * interval
    redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX', math.floor((nxt - now) / 1000) + 60000)
  end
end
return tat
`

// releaseScript takes ARGV[1] back from the counter at KEYS[1] if it still
// exists, never below 0; DECRBY keeps its TTL. A missing counter (its
// window is over) is not created again. It returns the value after.
var releaseScript = goredis.NewScript(releaseLua)

const releaseLua = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local n = tonumber(v) or 0
local d = tonumber(ARGV[1])
if d > n then d = n end
if d <= 0 then return n end
return redis.call('DECRBY', KEYS[1], d)
`

// scriptText is each script's source, for EVAL when a server has not
// loaded it.
var scriptText = map[*goredis.Script]string{bucketScript: bucketLua, takeScript: takeLua, releaseScript: releaseLua}

// scriptOf is the script that does an operation of kind k, nil for the
// kinds that are plain commands.
func scriptOf(k engine.OpKind) *goredis.Script {
	switch k {
	case engine.OpTokenBucket:
		return bucketScript
	case engine.OpTokenTake:
		return takeScript
	case engine.OpRelease:
		return releaseScript
	}
	return nil
}

func scriptName(k engine.OpKind) string {
	switch k {
	case engine.OpTokenTake:
		return "token take"
	case engine.OpRelease:
		return "release"
	}
	return "token bucket"
}

func scriptArgs(op *engine.CounterOp) []any {
	if op.Kind == engine.OpRelease {
		return []any{op.Hits}
	}
	return []any{op.Bucket.Now, op.Bucket.Interval, op.Bucket.Burst, op.Hits}
}
