// Package csvsafe tells which CSV cells a spreadsheet would run as a
// formula (CWE-1236, "CSV injection"). The API's CSV export neutralises
// them and sluice import refuses them, following OWASP's CSV Injection
// guidance: a cell that begins with =, +, -, @, TAB or CR is a formula to
// Excel, LibreOffice and Google Sheets, and prefixing it with a single
// quote makes it text. A plain number such as -0.25 or +3 is not a formula
// (a spreadsheet reads it as the number it is) and is left alone, so
// numeric data stays byte-identical.
package csvsafe

import "strconv"

// Formula reports whether a spreadsheet would evaluate cell.
func Formula(cell []byte) bool {
	if len(cell) == 0 {
		return false
	}
	switch cell[0] {
	case '=', '@', '\t', '\r':
		return true
	case '+', '-':
		return !number(cell)
	}
	return false
}

// number reports whether cell is a plain decimal number (sign, digits,
// fraction, exponent): what a spreadsheet takes as a value.
func number(cell []byte) bool {
	for _, c := range cell {
		if !('0' <= c && c <= '9' || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E') {
			return false
		}
	}
	_, err := strconv.ParseFloat(string(cell), 64)
	return err == nil
}

// Prefix is what makes a formula cell text.
const Prefix = '\''
