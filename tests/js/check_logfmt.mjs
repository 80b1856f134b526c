// Parses each line of a file with the npm logfmt package, an implementation independent of
// txo, and prints one JSON object per line with the pairs it found.
import { readFileSync } from "node:fs";
import logfmt from "logfmt";

for (const line of readFileSync(process.argv[2], "utf8").split("\n")) {
  if (line.length > 0) console.log(JSON.stringify(logfmt.parse(line)));
}
