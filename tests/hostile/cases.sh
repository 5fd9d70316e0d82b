# tests/hostile/cases.sh - the hostile-input corpus: one line per malformed input.
#
#   case_ KIND NAME EXIT REGEX SETUP
#
# KIND says which calculation reads the input (see tests/hostile/run.sh), EXIT the exit status
# scdino must end with (2 bad deck, 3 bad data), REGEX an extended regular expression the output
# must match (it names the file and says what is wrong), SETUP the shell command that makes the
# input in the case's directory (run by eval in a subshell).  Tools: rawtiff (a TIFF with any
# header), h5edit (change one thing in an HDF5 file), mktiff, and the shell functions of
# tests/hostile/run.sh: chars N C (N copies of character C), lines N S (N lines S), words N W.
# Fixture files that the setups damage: tiffs/B/z.tif (new), shards/manifest.h5,
# shards/shard-00000.h5 (3 classes, 90 images of 3 x 12 x 12 uint16, one shard),
# run/features_0002.h5 (84 rows of 4 features), run/checkpoint.h5.

# ---- decks (beyond tests/decks: sizes, bytes and numbers a text editor would not produce) ----
d=deck
case_ $d line_10mb 2 "deck\.nml:1:41: the string for run_dir is too long: 10000000 characters, at most 1023" \
  'printf "&control calculation = \"knn\", run_dir = \"" >deck.nml; chars 10000000 x >>deck.nml; echo "\" /" >>deck.nml'
case_ $d values_4m 2 "more than 65536 values for 'k'; no key takes that many" \
  '{ echo "&control calculation = \"knn\" /"; printf "&knn k = "; words 1000000 1; echo /; } >deck.nml'
case_ $d commas_8m 2 "more than 65536 values for 'k'" \
  '{ echo "&control calculation = \"knn\" /"; printf "&knn k = "; chars 1000000 ,; echo /; } >deck.nml'
case_ $d keys_1m 2 "\(\.\.\. 99000 more errors not shown\)" \
  '{ echo "&control calculation = \"knn\""; lines 100000 x=1; echo /; } >deck.nml'
case_ $d groups_1m 2 "99000 more errors not shown" \
  '{ echo "&control calculation = \"knn\" /"; lines 100000 "&zz /"; } >deck.nml'
case_ $d blanks_then_words 2 "deck\.nml:2:4000001: '=' expected after 'a'" \
  '{ echo "&control calculation = \"knn\""; chars 4000000 " "; words 200000 a; echo /; } >deck.nml'
case_ $d error_far_along 2 "deck\.nml:1:1000044: 'zzz' is not a number or logical" \
  '{ printf "&control calculation = \"knn\", run_dir = \""; chars 1000000 x; echo "\" zzz /"; } >deck.nml'
case_ $d larger_than_16mib 2 "deck\.nml: larger than 16 MiB; this is not an input deck" \
  '{ echo "&control calculation = \"knn\" /"; chars 17000000 "!"; } >deck.nml'
case_ $d dev_zero 2 "deck\.nml: larger than 16 MiB" 'ln -s /dev/zero deck.nml'
case_ $d dev_null 2 "calculation" 'ln -s /dev/null deck.nml'
case_ $d symlink_loop 2 "deck\.nml: cannot open the input deck: Too many levels of symbolic links" 'ln -s deck.nml deck.nml'
case_ $d utf16 2 "deck\.nml: is UTF-16 text \(byte-order mark ff fe\)" 'printf "\377\376&\000c\000o\000" >deck.nml'
case_ $d nul_late 2 "deck\.nml: contains a NUL byte \(offset 43\)" \
  '{ printf "&control calculation = \"knn\", run_dir = \"ab\000"; echo "\" /"; } >deck.nml'
case_ $d utf8_outside_strings 2 "deck\.nml:2:23: unexpected byte 0xc3 \(only ASCII outside strings\)" \
  'printf "&control calculation = \"knn\" /\n&data shard_dir = \"x\" \303\261 /\n" >deck.nml'
case_ $d latin1_in_key 2 "deck\.nml:2:7: '=' expected after 'shard_dir'" \
  'printf "&control calculation = \"knn\" /\n&data shard_dir\377 = \"x\" /\n" >deck.nml'
case_ $d terminal_escape 2 "unexpected byte 0x1b .*|&data shard_dir = \"x\" \?\[2J /" \
  'printf "&control calculation = \"knn\" /\n&data shard_dir = \"x\" \033[2J /\n" >deck.nml'
case_ $d quotes_1m 2 "the string for run_dir is too long: 500000 characters" \
  '{ printf "&control calculation = \"knn\", run_dir = "; chars 1000002 "'"'"'"; echo " /"; } >deck.nml'
case_ $d quotes_unterminated 2 "deck\.nml:1:41: unterminated string: no closing ' on this line" \
  '{ printf "&control calculation = \"knn\", run_dir = "; chars 1000001 "'"'"'"; echo " /"; } >deck.nml'
case_ $d quotes_alternating 2 "deck\.nml:1:[0-9]+: more than 65536 values for 'run_dir'" \
  '{ printf "&control calculation = \"knn\", run_dir = "; lines 200000 "\"'"'"'" | tr -d "\n"; echo " /"; } >deck.nml'
case_ $d int_overflow 2 "integer '-9223372036854775809' does not fit in 64 bits" \
  'printf "&control calculation = \"knn\", seed = -9223372036854775809 /\n" >deck.nml'
case_ $d real_underflow 2 "deck\.nml:2:26: teacher_temp = 1e-400 is out of range: it must be between 1e-06 and 100" \
  'printf "&control calculation = \"train\" /\n&training teacher_temp = 1e-400 /\n" >deck.nml'
case_ $d nan_word 2 "'NaN' is not a number or logical" 'printf "&control calculation = \"train\" /\n&training lr = NaN /\n" >deck.nml'
case_ $d inf_signed 2 "bad number '\+inf'" 'printf "&control calculation = \"train\" /\n&training lr = +inf /\n" >deck.nml'
case_ $d hex_number 2 "bad number '0x10'" 'printf "&control calculation = \"knn\" /\n&knn k = 0x10 /\n" >deck.nml'
case_ $d repeat_int_max 2 "deck\.nml:2:6: too many values for 'k': it holds at most 16, got 2147483647" 'printf "&control calculation = \"knn\" /\n&knn k = 2147483647*5 /\n" >deck.nml'
case_ $d repeat_over_int_max 2 "repeat count 2147483648 must be between 1 and 2147483647" \
  'printf "&control calculation = \"knn\" /\n&knn k = 2147483648*5 /\n" >deck.nml'
case_ $d repeat_sum_over_int_max 2 "deck\.nml:2:6: too many values for 'k': it holds at most 16, got 4294967294" \
  'printf "&control calculation = \"knn\" /\n&knn k = 2147483647*5, 2147483647*5, 3*1 /\n" >deck.nml'
case_ $d subscript_huge 2 "deck\.nml:2:7: subscript 999999999999999999 is out of range for 'channels'" \
  'printf "&control calculation = \"knn\" /\n&data channels(999999999999999999) = 1 /\n" >deck.nml'
case_ $d subscript_range_huge 2 "deck\.nml:2:6: subscript 999999999999999999 is out of range for 'k'" \
  'printf "&control calculation = \"knn\" /\n&knn k(1:999999999999999999) = 1 /\n" >deck.nml'
case_ $d subscript_19_digits 2 "bad subscript after 'channels'" \
  'printf "&control calculation = \"knn\" /\n&data channels(9223372036854775807) = 1 /\n" >deck.nml'
case_ $d key_1mb 2 "deck\.nml:2:1: unknown key 'aaaa" \
  '{ echo "&control calculation = \"knn\""; chars 1000000 a; echo " = 1 /"; } >deck.nml'
case_ $d group_1mb 2 "deck\.nml:2:1: unknown group &bbbb" \
  '{ echo "&control calculation = \"knn\" /"; printf "&"; chars 1000000 b; echo " /"; } >deck.nml'
case_ $d nested_groups_100k 2 "&g starts before &g \(line [0-9]+\) was closed" \
  '{ echo "&control calculation = \"knn\" /"; lines 100000 "&g"; echo /; } >deck.nml'
case_ $d cr_only_lines 2 "unknown key 'zz'" 'printf "&control calculation = \"knn\"\r zz = 1 /\r" >deck.nml'

# ---- TIFF files (prepare reads them) ----
d=tiff
z="tiffs/B/z\\.tif"
case_ $d png_not_tiff 3 "$z: not a readable TIFF file" 'printf "\211PNG\r\n\032\n0000000000000" >tiffs/B/z.tif'
case_ $d truncated_header 3 "$z: not a readable TIFF file" "rawtiff tiffs/B/z.tif spp=2 trunc=6"
case_ $d truncated_directory 3 "$z: not a readable TIFF file .*Can not read TIFF directory" "rawtiff tiffs/B/z.tif spp=2 trunc=1040"
case_ $d strip_beyond_eof 3 "$z: cannot decode strip 0 \(truncated or damaged file\)" \
  "rawtiff tiffs/B/z.tif spp=2 stripoff=99999999"
case_ $d claims_more_than_file 3 "$z: truncated or damaged file: 1 x 30000 x 30000 uncompressed uint16 samples need 1800000000 bytes, the file has [0-9]+" \
  "rawtiff tiffs/B/z.tif w=30000 h=30000 maxdata=1000"
# Refused from its header, before any of its (junk) data is decoded.
case_ $d compressed_wrong_size 3 "$z: is 8000x8000 pixels \(height x width\), expected 16x16 like most images" \
  "rawtiff tiffs/B/z.tif spp=2 w=8000 h=8000 comp=8 data=junk"
case_ $d zero_width 3 "$z: not a readable TIFF file.*(scanline size is zero|ImageWidth)" "rawtiff tiffs/B/z.tif spp=2 w=0"
case_ $d zero_length 3 "$z: not a readable TIFF file.*(RowsPerStrip|ImageLength)" "rawtiff tiffs/B/z.tif spp=2 h=0"
case_ $d zero_samples 3 "$z: not a readable TIFF file.*SamplesPerPixel" "rawtiff tiffs/B/z.tif spp=0"
case_ $d width_4g 3 "$z: image of 4294967295 x 16 pixels \(width x length\) is larger than the limit" \
  "rawtiff tiffs/B/z.tif spp=2 w=4294967295 maxdata=1000"
case_ $d width_2g_int_overflow 3 "$z: image of 2147483648 x 1 pixels .* larger than the limit" \
  "rawtiff tiffs/B/z.tif spp=2 w=2147483648 h=1 maxdata=1000"
case_ $d whc_over_2gib 3 "$z: image of 4 x 65536 x 65536 uint16 samples is too large \(over 2048 MiB\)" \
  "rawtiff tiffs/B/z.tif spp=4 w=65536 h=65536 maxdata=1000"
case_ $d whc_2_pow_40 3 "$z: image of 1 x 1048576 x 1048576 uint8 samples is too large" \
  "rawtiff tiffs/B/z.tif bps=8 w=1048576 h=1048576 maxdata=1000"
case_ $d samples_65535 3 "$z: truncated or damaged file: 65535 x 16 x 16 uncompressed uint16 samples" "rawtiff tiffs/B/z.tif spp=65535 maxdata=1000"
case_ $d bits_12 3 "$z: 12-bit unsigned integer samples are not supported" "rawtiff tiffs/B/z.tif spp=2 bps=12"
case_ $d bits_1 3 "$z: 1-bit unsigned integer samples are not supported" "rawtiff tiffs/B/z.tif spp=2 bps=1"
case_ $d bits_32_uint 3 "$z: 32-bit unsigned integer samples are not supported" "rawtiff tiffs/B/z.tif spp=2 bps=32"
case_ $d bits_16_float 3 "$z: 16-bit floating-point samples are not supported" "rawtiff tiffs/B/z.tif spp=2 bps=16 fmt=3"
case_ $d complex_samples 3 "$z: 32-bit unknown-format samples are not supported" "rawtiff tiffs/B/z.tif spp=2 bps=32 fmt=5"
case_ $d pages_differ 3 "$z: page 1 is 17x16 with 1 uint16 sample\(s\), page 0 is 16x16" \
  "rawtiff tiffs/B/z.tif pages=2 w2=17"
case_ $d pages_loop 3 "$z: has 3 channel\(s\), expected 2 like most images" "rawtiff tiffs/B/z.tif pages=3 loop=1"
case_ $d tile_8gib 3 "$z: (page 0: )?tiles of 65536 x 65536 pixels are larger than the limit of 64 MiB" \
  "rawtiff tiffs/B/z.tif spp=2 tile=65536 maxdata=1000"
case_ $d tile_zero_count 3 "$z: not a readable TIFF file.*tiles" "rawtiff tiffs/B/z.tif spp=2 tile=4294967280 maxdata=1000"
case_ $d compression_unknown 3 "$z: cannot decode strip 0 .*Compression scheme 9999" "rawtiff tiffs/B/z.tif spp=2 comp=9999"
case_ $d lzw_junk 3 "$z: cannot decode strip 0" "rawtiff tiffs/B/z.tif spp=2 comp=5 data=junk"
case_ $d deflate_junk 3 "$z: cannot decode strip 0.*Decoding error" "rawtiff tiffs/B/z.tif spp=2 comp=8 data=junk"
case_ $d jpeg_junk 3 "$z: cannot decode strip 0 .*Not a JPEG file" "rawtiff tiffs/B/z.tif spp=2 bps=8 comp=7 data=junk"
case_ $d old_jpeg 3 "$z: cannot decode strip 0 \(truncated or damaged file\)" "rawtiff tiffs/B/z.tif spp=2 bps=8 comp=6 data=junk"
case_ $d ycbcr_uncompressed 3 "$z: YCbCr images are not supported unless JPEG-compressed" \
  "rawtiff tiffs/B/z.tif spp=3 bps=8 photo=6"
case_ $d no_strip_offsets 3 "$z: not a readable TIFF file.*StripOffsets" "rawtiff tiffs/B/z.tif spp=2 omit=273"
case_ $d no_image_width 3 "$z: not a readable TIFF file \(libtiff: .*(ImageWidth|scanline size is zero)" "rawtiff tiffs/B/z.tif spp=2 omit=256"
case_ $d nan_planar 3 "$z: pixel \(channel 0, row 1, column 1\) is NaN" \
  "for f in tiffs/*/[12].tif; do mktiff \$f 2 16 16 f32 ramp || exit 1; done; rawtiff tiffs/B/z.tif spp=2 bps=32 fmt=3 planar=2 data=nan"
case_ $d inf_big_endian 3 "$z: pixel \(channel 0, row 1, column 1\) is infinite" \
  "for f in tiffs/*/[12].tif; do mktiff \$f 2 16 16 f32 ramp || exit 1; done; rawtiff tiffs/B/z.tif spp=2 bps=32 fmt=3 data=inf order=MM"
case_ $d nan_second_page 3 "$z: pixel .* is NaN" \
  "for f in tiffs/*/[12].tif; do mktiff \$f 2 16 16 f32 ramp || exit 1; done; rawtiff tiffs/B/z.tif pages=2 bps=32 fmt=3 data=nan"
case_ $d dangling_symlink 3 "$z: cannot open: No such file or directory" "ln -s nowhere.tif tiffs/B/z.tif"
case_ $d fifo 3 "$z: not a regular file" "mkfifo tiffs/B/z.tif"
case_ $d device 3 "$z: not a regular file" "ln -s /dev/zero tiffs/B/z.tif"

# ---- CSV file lists (&data file_list; prepare reads them before it writes anything: exit 2 and file:line) ----
d=csv
c="list\\.csv"
case_ $d missing_file 2 "$c:4: 'tiffs/B/9\\.tif' \\(relative to the CSV's folder\\): No such file or directory" \
  'printf "path,label\ntiffs/A/1.tif,A\ntiffs/A/2.tif,A\ntiffs/B/9.tif,B\n" >list.csv'
case_ $d missing_100k 2 "$c:2: 'nope\\.tif' .*No such file or directory \\(and 99999 more row\\(s\\) whose file is missing\\)" \
  '{ echo path; lines 100000 nope.tif; } >list.csv'
case_ $d duplicate_path 2 "$c:4: duplicate path: 'tiffs/A/1\\.tif' is the file of line 2" \
  'printf "path,label\ntiffs/A/1.tif,A\ntiffs/B/1.tif,B\ntiffs/A/1.tif,A\n" >list.csv'
case_ $d duplicate_spelt_otherwise 2 "$c:3: duplicate path: '\\./tiffs//B/\\.\\./A/1\\.tif' is the file of line 2" \
  'printf "path\ntiffs/A/1.tif\n./tiffs//B/../A/1.tif\n" >list.csv'
case_ $d ragged_short 2 "$c:3: 2 field\\(s\\), but the header names 3 column\\(s\\)" \
  'printf "path,label,donor\ntiffs/A/1.tif,A,d1\ntiffs/A/2.tif,A\n" >list.csv'
case_ $d ragged_trailing_comma 2 "$c:2: 4 field\\(s\\), but the header names 3" \
  'printf "path,label,donor\ntiffs/A/1.tif,A,d1,\n" >list.csv'
case_ $d latin1 2 "$c:3: byte 0xf6 in field 3 is not UTF-8" \
  'printf "path,label,donor\ntiffs/A/1.tif,A,d1\ntiffs/A/2.tif,A,J\366rg\n" >list.csv'
case_ $d utf16 2 "$c:1: byte 0xff in field 1 is not UTF-8" 'printf "\377\376p\000a\000" >list.csv'
case_ $d nul_byte 2 "$c:2: field 1 holds a NUL byte: not a text file" 'printf "path\ntif\000fs/A/1.tif\n" >list.csv'
case_ $d terminal_escape 2 "$c:2: field 2 holds the control character 0x1b" \
  'printf "path,donor\ntiffs/A/1.tif,\033[2J\n" >list.csv'
case_ $d unterminated_quote 2 "$c:2: the quoted field 1 that starts on this line runs past the line's end" \
  'printf "path,label\n\"tiffs/A/1.tif,A\ntiffs/A/2.tif,A\n" >list.csv'
case_ $d quote_at_end_of_file 2 "$c:2: the quoted field 2 that starts on this line has no closing quote" \
  'printf "path,label\ntiffs/A/1.tif,\"A" >list.csv'
case_ $d stray_quote 2 "$c:2: field 1: a quote inside a field that does not start with one" \
  'printf "path\ntiffs/A/1\".tif\n" >list.csv'
case_ $d empty_path 2 "$c:3: empty path \\(column 'path'\\)" 'printf "path,label\ntiffs/A/1.tif,A\n,B\n" >list.csv'
case_ $d empty_label 2 "$c:2: empty label \\(column 'label'\\)" 'printf "path,label\ntiffs/A/1.tif,\n" >list.csv'
case_ $d no_path_column 2 "$c:1: no column 'path' for the image paths .*the header names 'file', 'label'" \
  'printf "file,label\ntiffs/A/1.tif,A\n" >list.csv'
case_ $d header_only 2 "$c:1: the header is the only row: no images are listed" 'printf "path,label\n" >list.csv'
case_ $d empty_file 2 "$c:1: empty file: a header row naming the columns is required" ': >list.csv'
case_ $d column_twice 2 "$c:1: column 'donor' appears twice \\(columns 2 and 3\\)" 'printf "path,donor,donor\n" >list.csv'
case_ $d column_with_slash 2 "$c:1: column name '\\.\\./x' is not allowed" 'printf "path,../x\n" >list.csv'
case_ $d columns_1000 2 "$c:1: more than 256 fields" '{ printf path; lines 1000 ,c | tr -d "\n"; echo; } >list.csv'
case_ $d field_10mb 2 "$c:2: .*File name too long" '{ echo path; chars 10000000 x; echo; } >list.csv'
case_ $d lists_a_folder 2 "$c:2: 'tiffs/A' \\(relative to the CSV's folder\\): not a regular file" \
  'printf "path\ntiffs/A\n" >list.csv'
case_ $d csv_is_fifo 2 "&data file_list = 'list\\.csv': not a regular file" 'rm list.csv && mkfifo list.csv'
case_ $d csv_is_dev_zero 2 "&data file_list = 'list\\.csv': not a regular file" 'rm list.csv && ln -s /dev/zero list.csv'
case_ $d csv_is_folder 2 "&data file_list = 'list\\.csv': not a regular file" 'rm list.csv && mkdir list.csv'
case_ $d csv_missing 2 "&data file_list = 'list\\.csv': No such file or directory" 'rm list.csv'

# ---- shard sets: manifest.h5 and the shard files (knn's raw-pixel baseline reads every image) ----
d=shard
m="shards/manifest\\.h5"
s="shards/shard-00000\\.h5"
case_ $d manifest_is_fifo 3 "$m: not a regular file" "rm shards/manifest.h5 && mkfifo shards/manifest.h5"
case_ $d shard_is_fifo 3 "$m: shard $s is not a regular file" "rm shards/shard-00000.h5 && mkfifo shards/shard-00000.h5"
case_ $d manifest_text 3 "$m: not a readable HDF5 file" "echo 'not hdf5' >shards/manifest.h5"
case_ $d manifest_empty 3 "$m: not a readable HDF5 file" ": >shards/manifest.h5"
case_ $d manifest_truncated 3 "$m: not a readable HDF5 file|$m: cannot open it|$m: .*(missing|truncated)" \
  "head -c 3000 shards/manifest.h5 >m && mv m shards/manifest.h5"
case_ $d manifest_no_format 3 "$m: not a scdino shard manifest \(no 'format' attribute\)" "h5edit shards/manifest.h5 rmattr format"
case_ $d manifest_wrong_format 3 "$m: not a scdino shard manifest \(format is 'scdino-features'" \
  "h5edit shards/manifest.h5 attr_str format scdino-features"
case_ $d manifest_version_3 3 "$m: manifest version 3, but this scdino reads versions 1 to 2" "h5edit shards/manifest.h5 attr_int version 3"
case_ $d manifest_version_string 3 "$m: attribute 'version' must be a single integer" "h5edit shards/manifest.h5 attr_str version 1"
case_ $d manifest_version_array 3 "$m: attribute 'version' must be a single integer" "h5edit shards/manifest.h5 attr_ints version 1,1"
case_ $d channels_negative 3 "$m: implausible image shape channels=-3" "h5edit shards/manifest.h5 attr_int channels -3"
case_ $d height_zero 3 "$m: implausible image shape channels=3 height=0" "h5edit shards/manifest.h5 attr_int height 0"
case_ $d width_2_pow_32 3 "$m: implausible image shape .*width=4294967296" "h5edit shards/manifest.h5 attr_int width 4294967296"
case_ $d image_bytes_huge 3 "$m: images of 65535 x 1000000 x 1000000 uint16 values are larger than the limit" \
  "h5edit shards/manifest.h5 attr_int channels 65535 && h5edit shards/manifest.h5 attr_int height 1000000 && h5edit shards/manifest.h5 attr_int width 1000000"
case_ $d dtype_int8 3 "$m: dtype 'int8' is not uint16 or float32" "h5edit shards/manifest.h5 attr_str dtype int8"
case_ $d class_names_missing 3 "$m: dataset 'class_names' is missing" "h5edit shards/manifest.h5 rm class_names"
case_ $d class_names_integers 3 "$m: dataset 'class_names' must hold strings" "h5edit shards/manifest.h5 nums class_names i32 1,2,3"
case_ $d class_names_2_pow_40 3 "$m: dataset 'class_names' has 1099511627776 entries; at most 10000" \
  "h5edit shards/manifest.h5 lazy class_names str 1099511627776"
case_ $d class_names_unwritten 3 "$m: dataset 'class_names' claims 5000 values but stores only 0 bytes" \
  "h5edit shards/manifest.h5 lazy class_names str 5000"
case_ $d shards_2_pow_40 3 "$m: dataset 'shards' has 1099511627776 entries; at most 1048576" "h5edit shards/manifest.h5 lazy shards str 1099511627776"
case_ $d shard_file_missing 3 "$m: shard file shards/shard-00001\.h5 listed in the manifest is missing" \
  "h5edit shards/manifest.h5 strs shards shard-00000.h5,shard-00001.h5 && h5edit shards/manifest.h5 nums shard_counts i64 45,45"
case_ $d shard_name_traversal 3 "$m: shard 0 \('\.\./\.\./etc/passwd'\) has count 90 or a bad name" \
  "h5edit shards/manifest.h5 strs shards ../../etc/passwd"
case_ $d shard_count_negative 3 "$m: shard 0 \('shard-00000\.h5'\) has count -90 or a bad name" \
  "h5edit shards/manifest.h5 nums shard_counts i64 -90"
case_ $d shard_counts_overflow 3 "$m: the shard counts add up to more than 2147483647 images" \
  "cp shards/shard-00000.h5 shards/b.h5 && h5edit shards/manifest.h5 strs shards shard-00000.h5,b.h5 && h5edit shards/manifest.h5 nums shard_counts i64 4611686018427387904,4611686018427387904"
case_ $d shard_counts_missing 3 "$m: dataset 'shard_counts' is missing" "h5edit shards/manifest.h5 rm shard_counts"
case_ $d count_mismatch 3 "$m: attribute count=91 but the shard counts add up to 90" "h5edit shards/manifest.h5 attr_int count 91"
case_ $d label_out_of_range 3 "$m: image 5 has label 7, outside 0\.\.2" "h5edit shards/manifest.h5 set labels 5 7"
case_ $d no_classes_labelled 3 "$m: image 0 has label [0-9]+, but the set names no classes \(an unlabelled set's labels are -1\)" \
  "h5edit shards/manifest.h5 strs class_names ''"
case_ $d metadata_column_slash 3 "$m: metadata column name '\.\./x' is not a dataset name" \
  "h5edit shards/manifest.h5 strs metadata_columns ../x"
case_ $d label_negative 3 "$m: image 0 has label -1, outside 0\.\.2" "h5edit shards/manifest.h5 set labels 0 -1"
case_ $d labels_strings 3 "$m: dataset 'labels' must hold integers" "h5edit shards/manifest.h5 strs labels a,b"
case_ $d labels_short 3 "$m: dataset 'labels' has 3 values, expected 90" "h5edit shards/manifest.h5 nums labels i32 0,1,2"
case_ $d labels_unwritten 3 "$m: dataset 'labels' claims 90 values but stores only 0 bytes" "h5edit shards/manifest.h5 lazy labels i32 90"
case_ $d labels_is_group 3 "$m: 'labels' is not a dataset" "h5edit shards/manifest.h5 group labels"
case_ $d mean_short 3 "$m: dataset 'mean' has 1 value, expected 3" "h5edit shards/manifest.h5 nums mean f64 0.5"
case_ $d std_missing 3 "$m: dataset 'std' is missing" "h5edit shards/manifest.h5 rm std"
case_ $d mean_nan 3 "$m: mean of channel 0 is nan, outside \[0, 1\]" "h5edit shards/manifest.h5 set mean 0 nan"
case_ $d mean_inf 3 "$m: mean of channel 2 is inf, outside \[0, 1\]" "h5edit shards/manifest.h5 set mean 2 inf"
case_ $d std_tiny 3 "$m: std of channel 1 is 1e-300, neither 0 nor in \[1e-06, 0.5\]" "h5edit shards/manifest.h5 set std 1 1e-300"
case_ $d std_inf 3 "$m: std of channel 0 is inf, neither 0 nor" "h5edit shards/manifest.h5 set std 0 inf"
case_ $d std_negative 3 "$m: std of channel 0 is -0.1, neither 0 nor" "h5edit shards/manifest.h5 set std 0 -0.1"
case_ $d source_count_small 3 "$m: source_count 5 is smaller than count 90" "h5edit shards/manifest.h5 attr_int source_count 5"
case_ $d source_count_int64_min 3 "$m: source_count -9223372036854775808 is smaller than count 90" \
  "h5edit shards/manifest.h5 attr_int source_count -9223372036854775808"
case_ $d source_count_2_pow_60 3 "$m: source_count 1152921504606846976 is larger than the limit" \
  "h5edit shards/manifest.h5 attr_int source_count 1152921504606846976"
case_ $d skipped_index_unsorted 3 "$m: dataset 'skipped_index' is not an ascending list" \
  "h5edit shards/manifest.h5 attr_int source_count 92 && h5edit shards/manifest.h5 nums skipped_index i64 5,5"
case_ $d skipped_index_missing 3 "$m: dataset 'skipped_index' has 0 values, expected 2" \
  "h5edit shards/manifest.h5 attr_int source_count 92"
case_ $d shard_text 3 "shard $s: not a readable HDF5 file" "echo 'not hdf5' >shards/shard-00000.h5"
case_ $d shard_truncated 3 "$s: (not a readable HDF5 file|cannot open it|.*truncated|cannot read image)" \
  "head -c 20000 shards/shard-00000.h5 >x && mv x shards/shard-00000.h5"
case_ $d shard_is_directory 3 "$m: shard $s is not a regular file" "rm shards/shard-00000.h5 && mkdir shards/shard-00000.h5"
case_ $d images_missing 3 "$s: dataset 'images' is missing" "h5edit shards/shard-00000.h5 rm images"
case_ $d images_wrong_shape 3 "$s: 'images' has shape \[90, 3, 12, 13\], the manifest says \[90, 3, 12, 12\]" \
  "h5edit shards/shard-00000.h5 lazy images u16 90,3,12,13"
case_ $d images_int32 3 "$s: 'images' is not of type uint16 as the manifest says" "h5edit shards/shard-00000.h5 lazy images i32 90,3,12,12"
case_ $d images_unwritten 3 "$s: dataset 'images' claims 38880 values but stores only 0 bytes" \
  "h5edit shards/shard-00000.h5 lazy images u16 90,3,12,12"
case_ $d images_2d 3 "$s: dataset 'images' has 2 dimensions, expected 4" "h5edit shards/shard-00000.h5 nums2 images u16 2 1,2,3,4"
case_ $d index_wrong 3 "$s: image 3 has global index 99, the manifest places it at 3" "h5edit shards/shard-00000.h5 set index 3 99"
case_ $d index_missing 3 "$s: dataset 'index' is missing" "h5edit shards/shard-00000.h5 rm index"
# Damaged recorded chunk offsets are not trusted (the images are read through HDF5 instead): the
# raw-pixel kNN sees the true pixels (garbage from offset 0 gave 41.18 % before the check).
case_ $d image_offsets_zeroed 0 "kNN on raw pixels 4x4 \(48-d\): best Top-1 94\.12 %" \
  "h5edit shards/shard-00000.h5 fill image_offsets 0 1 88"
case_ $d image_offset_beyond_eof 0 "kNN on raw pixels 4x4 \(48-d\): best Top-1 94\.12 %" \
  "h5edit shards/shard-00000.h5 set image_offsets 5 99999999999"
# Values that would come from outside the file (bypassing its checksums) are refused at open: each
# of these read another file's (here identical) values before.
case_ $d manifest_external_link 3 "$m: 'labels' is an external link to '/labels' in .*/m2\.h5; scdino reads only objects stored in the file itself" \
  'cp shards/manifest.h5 m2.h5 && h5edit shards/manifest.h5 elink labels "$PWD/m2.h5" /labels'
case_ $d manifest_virtual 3 "$m: dataset 'mean' is a virtual dataset" \
  'cp shards/manifest.h5 m2.h5 && h5edit shards/manifest.h5 virtual mean "$PWD/m2.h5" mean'
case_ $d shard_external_storage 3 "shard $s: dataset 'index' keeps its values in an external file \('.*/index\.bin'\)" \
  'h5edit shards/shard-00000.h5 external index "$PWD/index.bin"'
case_ $d manifest_soft_link 3 "$m: 'std' is a soft link to '/mean'" 'h5edit shards/manifest.h5 soft std /mean'

# ---- features files (knn reads them) ----
d=features
f="features file run/features_0002\\.h5"
case_ $d text 3 "$f: not a readable HDF5 file" "echo 'not hdf5' >run/features_0002.h5"
case_ $d truncated 3 "$f: (not a readable HDF5 file|cannot open|missing|cannot read)" \
  "head -c 4000 run/features_0002.h5 >x && mv x run/features_0002.h5"
case_ $d no_format 3 "$f: attribute 'format' is missing" "h5edit run/features_0002.h5 rmattr format"
case_ $d wrong_format 3 "$f: format attribute is 'scdino-shards', expected 'scdino-features'" \
  "h5edit run/features_0002.h5 attr_str format scdino-shards"
case_ $d version_9 3 "$f: format version 9 is not supported" "h5edit run/features_0002.h5 attr_int version 9"
case_ $d version_string 3 "$f: attribute 'version' must be a single integer" "h5edit run/features_0002.h5 attr_str version 1"
case_ $d epoch_missing 3 "$f: attribute 'epoch' is missing" "h5edit run/features_0002.h5 rmattr epoch"
case_ $d features_missing 3 "$f: dataset 'features' is missing" "h5edit run/features_0002.h5 rm features"
case_ $d features_1d 3 "$f: dataset 'features' has 1 dimension, expected 2" "h5edit run/features_0002.h5 nums features f32 1,2,3"
case_ $d features_integers 3 "$f: dataset 'features' must hold floating-point values" "h5edit run/features_0002.h5 lazy features i32 84,4"
case_ $d features_empty 3 "$f: dataset 'features' is empty \(0 x 4\)" "h5edit run/features_0002.h5 lazy features f32 0,4"
case_ $d features_dim_huge 3 "$f: dataset 'features' has 2000000 columns" "h5edit run/features_0002.h5 lazy features f32 84,2000000"
case_ $d features_unwritten 3 "$f: dataset 'features' claims 336 values but stores only 0 bytes" \
  "h5edit run/features_0002.h5 lazy features f32 84,4"
case_ $d rows_2_pow_40 3 "$f: dataset 'features' has 1099511627776 rows, more than the limit" \
  "for x in labels index; do h5edit run/features_0002.h5 lazy \$x i64 1099511627776 || exit 1; done; h5edit run/features_0002.h5 lazy features f32 1099511627776,4"
case_ $d rows_2_pow_30_unwritten 3 "$f: dataset 'features' claims 4294967296 values but stores only 0 bytes" \
  "for x in labels index; do h5edit run/features_0002.h5 lazy \$x i64 1073741824 || exit 1; done; h5edit run/features_0002.h5 lazy features f32 1073741824,4"
case_ $d features_nan 3 "$f: features\[1, 3\] is NaN" "h5edit run/features_0002.h5 set features 7 nan"
case_ $d features_inf 3 "$f: features\[0, 0\] is infinite" "h5edit run/features_0002.h5 set features 0 -inf"
case_ $d not_normalised 3 "$f: row 2 of 'features' has length .*; rows must be L2-normalised" "h5edit run/features_0002.h5 set features 8 5"
case_ $d label_out_of_range 3 "$f: labels\[3\] = 3 is outside 0\.\.2 \(3 class names\)" "h5edit run/features_0002.h5 set labels 3 3"
case_ $d label_negative 3 "$f: labels\[0\] = -2147483648 is outside" "h5edit run/features_0002.h5 set labels 0 -2147483648"
case_ $d labels_rows_mismatch 3 "$f: 'labels' has 2 rows but 'features' has 84" "h5edit run/features_0002.h5 nums labels i32 0,1"
case_ $d index_duplicate 3 "$f: index value 0 appears twice \(rows 0 and 1\)" "h5edit run/features_0002.h5 set index 1 0"
case_ $d index_negative 3 "$f: index\[2\] = -4 is negative" "h5edit run/features_0002.h5 set index 2 -4"
case_ $d class_names_2_pow_40 3 "$f: dataset 'class_names' has 1099511627776 entries; at most 10000 are allowed" \
  "h5edit run/features_0002.h5 lazy class_names str 1099511627776"
case_ $d class_names_empty 3 "$f: labels\[0\] = [0-9]+, but the file names no classes \(unlabelled rows have label -1\)" \
  "h5edit run/features_0002.h5 strs class_names ''"
case_ $d paths_2_pow_40 3 "$f: dataset 'paths' has 1099511627776 entries; at most 84 are allowed" \
  "h5edit run/features_0002.h5 lazy paths str 1099511627776"
case_ $d paths_unwritten 3 "$f: dataset 'paths' claims 84 values but stores only 0 bytes" "h5edit run/features_0002.h5 lazy paths str 84"
case_ $d epoch_array 3 "$f: attribute 'epoch' must be a single integer" "h5edit run/features_0002.h5 attr_ints epoch 1,2"
case_ $d external_storage 3 "$f: dataset 'features' keeps its values in an external file \('.*/x\.bin'\)" \
  'h5edit run/features_0002.h5 external features "$PWD/x.bin"'
case_ $d external_link 3 "$f: 'labels' is an external link to '/labels' in .*/f2\.h5" \
  'cp run/features_0002.h5 f2.h5 && h5edit run/features_0002.h5 elink labels "$PWD/f2.h5" /labels'
case_ $d virtual 3 "$f: dataset 'index' is a virtual dataset" \
  'cp run/features_0002.h5 f2.h5 && h5edit run/features_0002.h5 virtual index "$PWD/f2.h5" index'
case_ $d metadata_missing 3 "$f: dataset 'metadata/donor' is missing" "h5edit run/features_0002.h5 strs metadata_columns donor"
case_ $d metadata_integers 3 "$f: dataset 'metadata/donor' must hold strings" \
  "h5edit run/features_0002.h5 strs metadata_columns donor && h5edit run/features_0002.h5 group metadata && h5edit run/features_0002.h5 nums metadata/donor i32 1,2"

# ---- checkpoints (features reads the weights; train with restart=.true. reads the whole state) ----
d=ckpt
c="checkpoint run/checkpoint\\.h5"
t="teacher/backbone"
case_ $d text 3 "$c: not a readable HDF5 file" "echo 'not hdf5' >run/checkpoint.h5"
case_ $d empty 3 "$c: not a readable HDF5 file" ": >run/checkpoint.h5"
case_ $d truncated 3 "$c: (not a readable HDF5 file|cannot open it as an HDF5 file|cannot read tensor)" \
  "head -c 60000 run/checkpoint.h5 >x && mv x run/checkpoint.h5"
case_ $d no_format 3 "$c: no 'format' attribute: not an scdino checkpoint" "h5edit run/checkpoint.h5 rmattr format"
case_ $d wrong_format 3 "$c: format is 'scdino-features', expected 'scdino-checkpoint'" \
  "h5edit run/checkpoint.h5 attr_str format scdino-features"
case_ $d version_3 3 "$c: version 3 is not supported by this scdino \(reads versions 1 to 2\)" "h5edit run/checkpoint.h5 attr_int version 3"
case_ $d version_string 3 "$c: attribute 'version' must be a single integer" "h5edit run/checkpoint.h5 attr_str version 1"
case_ $d version_array 3 "$c: attribute 'version' must be a single integer" "h5edit run/checkpoint.h5 attr_ints version 1,1"
case_ $d patch_size_negative 3 "$c: attribute 'patch_size' = -1 is out of range" "h5edit run/checkpoint.h5 attr_int patch_size -1"
case_ $d embed_dim_2_pow_40 3 "$c: attribute 'embed_dim' = 1099511627776 is out of range" \
  "h5edit run/checkpoint.h5 attr_int embed_dim 1099511627776"
# (the deck sets embed_dim = 8 itself: the checkpoint contradicts it, named before any tensor is read)
case_ $d embed_dim_other 3 "$c does not fit this deck: &model embed_dim = 8 in the deck, but 16 in the checkpoint" \
  "h5edit run/checkpoint.h5 attr_int embed_dim 16"
case_ $d channels_65 3 "$c: attribute 'channels' must be 1 to 64 integers" \
  "h5edit run/checkpoint.h5 attr_ints channels \$(seq -s, 0 64)"
case_ $d iteration_outside_epoch 3 "$c: iteration 999 is outside its epoch" "h5edit run/checkpoint.h5 attr_int iteration 999"
case_ $d teacher_missing 3 "$c: no group 'teacher'" "h5edit run/checkpoint.h5 rm teacher"
case_ $d tensor_missing 3 "$c: tensor $t\.norm\.weight is missing; the model of this deck needs it with shape \[8\]" \
  "h5edit run/checkpoint.h5 rm $t.norm.weight"
case_ $d tensor_shape 3 "$c: tensor $t\.norm\.weight has shape \[3\] in the checkpoint, but the model of this deck needs \[8\]" \
  "h5edit run/checkpoint.h5 nums $t.norm.weight f32 1,2,3"
case_ $d tensor_2_pow_40 3 "$c: tensor $t\.pos_embed has shape \[1, 1099511627776, 8\]" \
  "h5edit run/checkpoint.h5 lazy $t.pos_embed f32 1,1099511627776,8"
case_ $d tensor_integers 3 "$c: tensor $t\.norm\.weight does not hold floating-point values" \
  "h5edit run/checkpoint.h5 nums $t.norm.weight i32 1,1,1,1,1,1,1,1"
case_ $d tensor_nan 3 "$c: tensor $t\.blocks\.0\.attn\.qkv\.weight holds a non-finite value at element 5" \
  "h5edit run/checkpoint.h5 set $t.blocks.0.attn.qkv.weight 5 nan"
case_ $d tensor_inf 3 "$c: tensor $t\.cls_token holds a non-finite value at element 0" "h5edit run/checkpoint.h5 set $t.cls_token 0 -inf"
case_ $d tensor_is_group 3 "$c: '$t\.norm\.bias' is not a dataset" "h5edit run/checkpoint.h5 group $t.norm.bias"
case_ $d external_storage 3 "$c: dataset '$t\.norm\.weight' keeps its values in an external file \('.*/w\.bin'\)" \
  'h5edit run/checkpoint.h5 external teacher/backbone.norm.weight "$PWD/w.bin"'
case_ $d external_link 3 "$c: 'teacher' is an external link to '/teacher' in .*/other\.h5" \
  'cp run/checkpoint.h5 other.h5 && h5edit run/checkpoint.h5 elink teacher "$PWD/other.h5" /teacher'
case_ $d virtual 3 "$c: dataset '$t\.norm\.weight' is a virtual dataset" \
  'cp run/checkpoint.h5 other.h5 && h5edit run/checkpoint.h5 virtual teacher/backbone.norm.weight "$PWD/other.h5" teacher/backbone.norm.weight'
case_ $d soft_link 3 "$c: '$t\.norm\.weight' is a soft link to '/student/backbone\.norm\.weight'" \
  'h5edit run/checkpoint.h5 soft teacher/backbone.norm.weight /student/backbone.norm.weight'
case_ $d tensor_of_deeper_model 3 "$c: tensor teacher/backbone\.blocks\.1\.norm1\.weight is not part of the model of this deck" \
  "h5edit run/checkpoint.h5 nums $t.blocks.1.norm1.weight f32 1,1,1,1,1,1,1,1"
# /normalization: the training set's statistics and channel names (features and attention use them)
case_ $d normalization_std_zero 3 "$c: normalization of channel 1: mean [0-9.e+-]+, std 0 \(a finite mean and a positive std expected\)" \
  "h5edit run/checkpoint.h5 set normalization/std 1 0"
case_ $d normalization_mean_nan 3 "$c: normalization of channel 0: mean nan" "h5edit run/checkpoint.h5 set normalization/mean 0 nan"
case_ $d normalization_names_2 3 "$c: normalization/channel_names has 2 names for 3 channels" \
  "h5edit run/checkpoint.h5 strs normalization/channel_names a,b"
case_ $d normalization_std_short 3 "$c: .*std" "h5edit run/checkpoint.h5 nums normalization/std f64 0.2,0.2"
case_ $d normalization_not_group 3 "$c: 'normalization' is not a group" \
  "h5edit run/checkpoint.h5 rm normalization && h5edit run/checkpoint.h5 nums normalization f64 1"
d=restart
case_ $d no_training_state 3 "$c: holds weights but no training state" "h5edit run/checkpoint.h5 rm optimizer"
case_ $d exp_avg_missing 3 "$c: .*optimizer/exp_avg/head\.mlp\.0\.bias.* missing" "h5edit run/checkpoint.h5 rm optimizer/exp_avg/head.mlp.0.bias"
case_ $d exp_avg_sq_nan 3 "$c: tensor optimizer/exp_avg_sq/head\.mlp\.0\.weight holds a non-finite value" \
  "h5edit run/checkpoint.h5 set optimizer/exp_avg_sq/head.mlp.0.weight 3 nan"
case_ $d step_negative 3 "$c: optimizer/step/head\.mlp\.0\.bias = -5 is negative" "h5edit run/checkpoint.h5 set optimizer/step/head.mlp.0.bias 0 -5"
case_ $d step_missing 3 "$c: optimizer/step/head\.mlp\.0\.bias is missing" "h5edit run/checkpoint.h5 rm optimizer/step/head.mlp.0.bias"
case_ $d center_shape 3 "$c: .*dino_loss/center.*shape" "h5edit run/checkpoint.h5 nums2 dino_loss/center f32 1 1,2"
case_ $d center_nan 3 "$c: .*dino_loss/center holds a non-finite value" "h5edit run/checkpoint.h5 set dino_loss/center 3 nan"
case_ $d epoch_negative 3 "$c: holds weights but no training state" "h5edit run/checkpoint.h5 attr_int epoch -7"

# ---- the untouched fixtures must run: the cases above fail because of their damage ----
case_ tiff control_ok 0 "" true
case_ csv control_ok 0 "" true
case_ shard control_ok 0 "kNN on raw pixels 4x4 \(48-d\): best Top-1 94\.12 %" true
case_ features control_ok 0 "" true
case_ ckpt control_ok 0 "" true
case_ restart control_ok 0 "" true
