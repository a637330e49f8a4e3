package odata

import (
	"bytes"
	"encoding/xml"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
)

// The service's CSDL: one namespace, one container, the four entity sets.
// Everything is derived from the field lists of package query, so the
// document cannot drift from what the collections return and accept.
const (
	csdlNamespace = "DataStream"
	csdlContainer = "Default"
)

// entitySets are the collections in document order with their entity
// type names.
var entitySets = []struct {
	coll *query.Collection
	typ  string
}{
	{query.Metadata, "Dataset"},
	{query.Locations, "Location"},
	{query.Observations, "Observation"},
	{query.Records, "Record"},
}

// edmType is the CSDL type of a field; stored JSON documents are arrays of
// strings.
func edmType(c *query.Collection, f query.Field) string {
	switch f.Kind {
	case query.KindInt:
		return "Edm.Int64"
	case query.KindFloat:
		return "Edm.Double"
	case query.KindDate:
		return "Edm.Date"
	case query.KindTime:
		return "Edm.TimeOfDay"
	case query.KindTimestamp:
		return "Edm.DateTimeOffset"
	case query.KindJSON:
		return "Collection(Edm.String)"
	}
	if c.UUIDKey && f.Name == "Id" {
		return "Edm.Guid"
	}
	return "Edm.String"
}

// nonFilterable lists the properties of c that $filter refuses, and
// filterOnly the names $filter accepts that are not properties (they filter
// by related data: a location's region, an observation's year, ...).
func filterSplit(c *query.Collection) (nonFilterable, filterOnly []string) {
	accepted := map[string]bool{}
	for _, n := range c.FilterableNames() {
		accepted[n] = true
	}
	for _, f := range c.Fields {
		if !accepted[f.Name] {
			nonFilterable = append(nonFilterable, f.Name)
		}
		delete(accepted, f.Name)
	}
	for n := range accepted {
		filterOnly = append(filterOnly, n)
	}
	sort.Strings(filterOnly)
	return nonFilterable, filterOnly
}

func setDescription(c *query.Collection, filterOnly []string) string {
	d := "Rows in Id order, paged with @odata.nextLink ($skiptoken); $top at most " + strconv.Itoa(query.MaxTop) + "."
	if len(filterOnly) > 0 {
		d += " $filter also accepts " + strings.Join(filterOnly, ", ") + " (conditions on related data)."
	}
	return d
}

// metadataXML builds the CSDL XML document ($metadata).
func metadataXML() []byte {
	var b bytes.Buffer
	attr := func(s string) string {
		var e bytes.Buffer
		_ = xml.EscapeText(&e, []byte(s)) // writes to memory
		return strings.ReplaceAll(e.String(), `"`, "&#34;")
	}
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?>
<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">
  <edmx:Reference Uri="https://oasis-tcs.github.io/odata-vocabularies/vocabularies/Org.OData.Capabilities.V1.xml">
    <edmx:Include Namespace="Org.OData.Capabilities.V1" Alias="Capabilities"/>
  </edmx:Reference>
  <edmx:Reference Uri="https://oasis-tcs.github.io/odata-vocabularies/vocabularies/Org.OData.Core.V1.xml">
    <edmx:Include Namespace="Org.OData.Core.V1" Alias="Core"/>
  </edmx:Reference>
  <edmx:DataServices>
    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="` + csdlNamespace + `">
`)
	for _, es := range entitySets {
		b.WriteString(`      <EntityType Name="` + es.typ + `">
        <Key>
          <PropertyRef Name="Id"/>
        </Key>
`)
		for _, f := range es.coll.Fields {
			b.WriteString(`        <Property Name="` + attr(f.Name) + `" Type="` + edmType(es.coll, f) + `"`)
			if !f.Nullable {
				b.WriteString(` Nullable="false"`)
			}
			b.WriteString("/>\n")
		}
		b.WriteString("      </EntityType>\n")
	}
	b.WriteString(`      <EntityContainer Name="` + csdlContainer + `">
`)
	for _, es := range entitySets {
		non, only := filterSplit(es.coll)
		b.WriteString(`        <EntitySet Name="` + es.coll.Name + `" EntityType="` + csdlNamespace + "." + es.typ + `">
          <Annotation Term="Core.Description" String="` + attr(setDescription(es.coll, only)) + `"/>
          <Annotation Term="Capabilities.FilterRestrictions">
            <Record>
              <PropertyValue Property="Filterable" Bool="true"/>
              <PropertyValue Property="NonFilterableProperties">
                <Collection>
`)
		for _, n := range non {
			b.WriteString("                  <PropertyPath>" + attr(n) + "</PropertyPath>\n")
		}
		b.WriteString(`                </Collection>
              </PropertyValue>
            </Record>
          </Annotation>
          <Annotation Term="Capabilities.SortRestrictions">
            <Record>
              <PropertyValue Property="Sortable" Bool="false"/>
            </Record>
          </Annotation>
          <Annotation Term="Capabilities.CountRestrictions">
            <Record>
              <PropertyValue Property="Countable" Bool="true"/>
            </Record>
          </Annotation>
          <Annotation Term="Capabilities.TopSupported" Bool="true"/>
          <Annotation Term="Capabilities.SkipSupported" Bool="false"/>
        </EntitySet>
`)
	}
	b.WriteString(`      </EntityContainer>
    </Schema>
  </edmx:DataServices>
</edmx:Edmx>
`)
	return b.Bytes()
}

// metadataJSON builds the same document in the CSDL JSON format (OData
// 4.01 CSDL JSON; $Type and $Nullable are always written, not left to
// their defaults, so a reader need not know them).
func metadataJSON() []byte {
	str := func(b []byte, s string) []byte { return jsonenc.AppendString(b, []byte(s)) }
	b := []byte(`{"$Version":"4.0","$EntityContainer":"` + csdlNamespace + "." + csdlContainer + `",`)
	b = append(b, `"$Reference":{"https://oasis-tcs.github.io/odata-vocabularies/vocabularies/Org.OData.Capabilities.V1.json":{"$Include":[{"$Namespace":"Org.OData.Capabilities.V1","$Alias":"Capabilities"}]},`...)
	b = append(b, `"https://oasis-tcs.github.io/odata-vocabularies/vocabularies/Org.OData.Core.V1.json":{"$Include":[{"$Namespace":"Org.OData.Core.V1","$Alias":"Core"}]}},`...)
	b = append(b, `"`+csdlNamespace+`":{`...)
	for _, es := range entitySets {
		b = str(b, es.typ)
		b = append(b, `:{"$Kind":"EntityType","$Key":["Id"]`...)
		for _, f := range es.coll.Fields {
			b = append(b, ',')
			b = str(b, f.Name)
			t := edmType(es.coll, f)
			if inner, ok := strings.CutPrefix(t, "Collection("); ok {
				b = append(b, `:{"$Collection":true,"$Type":`...)
				b = str(b, strings.TrimSuffix(inner, ")"))
			} else {
				b = append(b, `:{"$Type":`...)
				b = str(b, t)
			}
			b = append(b, `,"$Nullable":`...)
			b = strconv.AppendBool(b, f.Nullable)
			b = append(b, '}')
		}
		b = append(b, "},"...)
	}
	b = append(b, `"`+csdlContainer+`":{"$Kind":"EntityContainer"`...)
	for _, es := range entitySets {
		non, only := filterSplit(es.coll)
		b = append(b, ',')
		b = str(b, es.coll.Name)
		b = append(b, `:{"$Collection":true,"$Type":`...)
		b = str(b, csdlNamespace+"."+es.typ)
		b = append(b, `,"@Core.Description":`...)
		b = str(b, setDescription(es.coll, only))
		b = append(b, `,"@Capabilities.FilterRestrictions":{"Filterable":true,"NonFilterableProperties":[`...)
		for i, n := range non {
			if i > 0 {
				b = append(b, ',')
			}
			b = str(b, n)
		}
		b = append(b, `]},"@Capabilities.SortRestrictions":{"Sortable":false},"@Capabilities.CountRestrictions":{"Countable":true},"@Capabilities.TopSupported":true,"@Capabilities.SkipSupported":false}`...)
	}
	return append(b, "}}}"...)
}
