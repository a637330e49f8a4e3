package actors

// SetReleaseYield makes f what Close calls to give up its core before it
// wakes held shards, until the returned func restores it.
func SetReleaseYield(f func()) (restore func()) {
	was := releaseYield
	releaseYield = f
	return func() { releaseYield = was }
}
