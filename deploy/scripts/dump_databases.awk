# The databases a pg_dumpall file creates, one name per line, as written in CREATE DATABASE (quoted
# identifiers unquoted: spaces and doubled quotes kept). restore.sh drops exactly these; backup.sh
# checks that `ldtm` is among them. A quoted name is read to its closing quote: `"team reports"` is
# one database, not `team` (issue 38 D1).
/^CREATE DATABASE / {
    rest = substr($0, length("CREATE DATABASE ") + 1)
    if (substr(rest, 1, 1) != "\"") {
        split(rest, parts, /[ ;]/)
        print parts[1]
        next
    }
    name = ""
    i = 2
    while (i <= length(rest)) {
        c = substr(rest, i, 1)
        if (c == "\"") {
            if (substr(rest, i + 1, 1) == "\"") { name = name "\""; i += 2; continue }
            break
        }
        name = name c
        i++
    }
    print name
}
