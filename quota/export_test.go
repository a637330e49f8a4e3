package quota

import "github.com/sluicehq/sluice/engine/alloc"

// ShardOf is the shard owning domain's bucket b, for tests that place
// buckets on shards.
func (s *Service) ShardOf(domain string, b alloc.BucketID) int {
	return s.shardOf(domain + "\x00" + string(b))
}
