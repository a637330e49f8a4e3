package odata

import (
	"strings"
	"testing"
)

// TestMetadataFollowsFieldTable checks that $metadata (XML and JSON) is
// derived from the field table: every property with its type, every field
// $filter refuses among the non-filterable properties, and every
// filter-only field named in the set's description.
func TestMetadataFollowsFieldTable(t *testing.T) {
	xmlDoc, jsonDoc := string(metadataXML()), string(metadataJSON())
	for _, es := range entitySets {
		c := es.coll
		typeXML := section(xmlDoc, `<EntityType Name="`+es.typ+`">`, "</EntityType>")
		setXML := section(xmlDoc, `<EntitySet Name="`+c.Name+`"`, "</EntitySet>")
		setJSON := section(jsonDoc, `"`+c.Name+`":{"$Collection":true`, "}}")
		for _, f := range c.Fields {
			if !strings.Contains(typeXML, `<Property Name="`+f.Name+`" Type="`+edmType(c, f)+`"`) {
				t.Errorf("%s: $metadata lacks property %s of type %s", c.Name, f.Name, edmType(c, f))
			}
			if !strings.Contains(jsonDoc, `"`+f.Name+`":{`) {
				t.Errorf("%s: CSDL JSON lacks property %s", c.Name, f.Name)
			}
			_, _, filterable := c.Filterable(f.Name)
			if listed := strings.Contains(setXML, "<PropertyPath>"+f.Name+"</PropertyPath>"); listed == filterable {
				t.Errorf("%s: %s filterable %v, listed as non-filterable %v", c.Name, f.Name, filterable, listed)
			}
		}
		for _, f := range c.FilterOnly {
			if !strings.Contains(setXML, f.Name) || !strings.Contains(setJSON, f.Name) {
				t.Errorf("%s: the description does not name the filter-only field %s", c.Name, f.Name)
			}
		}
	}
}

// section returns the part of doc from start to the first end after it.
func section(doc, start, end string) string {
	i := strings.Index(doc, start)
	if i < 0 {
		return ""
	}
	j := strings.Index(doc[i:], end)
	if j < 0 {
		return doc[i:]
	}
	return doc[i : i+j]
}
