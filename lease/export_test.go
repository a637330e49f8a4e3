package lease

// Tracked is how many keys' states the counter keeps.
func (c *Counter) Tracked() int {
	n := 0
	for i := range c.stripes {
		c.stripes[i].mu.Lock()
		n += len(c.stripes[i].m)
		c.stripes[i].mu.Unlock()
	}
	return n
}

// Waiting is how many decisions wait for a reservation.
func (c *Counter) Waiting() int {
	n := 0
	for i := range c.stripes {
		c.stripes[i].mu.Lock()
		for _, st := range c.stripes[i].m {
			n += len(st.waiters)
		}
		c.stripes[i].mu.Unlock()
	}
	return n
}
