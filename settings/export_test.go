package settings

// ReadForTest is name as the service reads it from env, with the error
// reading it left (for the tests of package settings_test).
func ReadForTest(env map[string]string, name string) (string, error) {
	e := newEnv(FromMap(env))
	return e.String(name, ""), e.Err()
}
