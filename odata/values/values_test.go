package values

import "testing"

func TestLoad(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	// Sizes stated by the compatibility spec; a truncated copy would change them.
	for _, c := range []struct {
		list string
		n    int
	}{
		{ActivityType, 35}, {ActivityGroupType, 7}, {ActivityMediaName, 8},
		{MonitoringLocationType, 24}, {ResultDetectionCondition, 6}, {ResultValueType, 5},
		{ResultStatusID, 6}, {ResultUnit, 123}, {CharacteristicName, 1661},
	} {
		v := s.List(c.list)
		if v == nil {
			t.Fatalf("list %s missing", c.list)
		}
		if len(v.Values) != c.n {
			t.Errorf("%s: %d values, want %d", c.list, len(v.Values), c.n)
		}
	}
	for _, at := range s.List(ActivityType).Values {
		g, ok := s.GroupType(at)
		if !ok {
			t.Errorf("ActivityType %q has no group", at)
			continue
		}
		if !s.List(ActivityGroupType).Contains(g) {
			t.Errorf("group %q of %q is not an ActivityGroupType", g, at)
		}
	}
	if u := s.Units("Titanium"); len(u) != 1 || u[0] != "ug/L" {
		t.Errorf("Titanium units = %q", u)
	}
	uc := s.UnitCharacteristics()
	if len(uc) < 300 {
		t.Errorf("only %d characteristics with units", len(uc))
	}
	for _, c := range uc {
		if !s.List(CharacteristicName).Contains(c) {
			t.Errorf("UnitCharacteristics returned unknown characteristic %q", c)
		}
	}
}
