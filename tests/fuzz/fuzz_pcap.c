/* fuzz_pcap — capture's packet decoder (probes/lib/pr_pcap.h) on packets as libpcap hands them
 * over, several per input so the connection table is driven too.
 * Input: a link-type selector byte, the server port (2 bytes, big-endian; 0: none), a line-size
 * byte (0: PR_PCAP_LINE_MAX, else that many bytes, to cut lines short), then packets, each a
 * 2-byte big-endian length and its bytes (the last one takes what is left).  Each packet is
 * copied into a buffer of exactly its length, so ASan sees a read past caplen.
 * Seeds: the packets of the .pcap files in tests/data/pcap (tests/fuzz/seeds.py). */
#include "pr_pcap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int linktypes[] = {
	PR_DLT_EN10MB, PR_DLT_LINUX_SLL, PR_DLT_LINUX_SLL2, PR_DLT_RAW, PR_LINKTYPE_RAW,
	PR_LINKTYPE_IPV4, PR_LINKTYPE_IPV6, 147,
};

static struct pr_pcap_table table;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char line[PR_PCAP_LINE_MAX];
	size_t linesz, len;
	uint8_t *pkt;
	int lt;

	if (size < 4)
		return 0;
	lt = linktypes[data[0] % (sizeof(linktypes) / sizeof(linktypes[0]))];
	pr_pcap_init(&table, (uint16_t)(data[1] << 8 | data[2]));
	linesz = data[3] ? data[3] : sizeof(line);
	data += 4;
	size -= 4;
	while (size > 0) {
		len = size >= 2 ? (size_t)(data[0] << 8 | data[1]) : size;
		if (size >= 2) {
			data += 2;
			size -= 2;
		}
		if (len > size)
			len = size;
		pkt = malloc(len ? len : 1);
		if (pkt == NULL)
			return 0;
		memcpy(pkt, data, len);
		(void)pr_pcap_decode(&table, lt, pkt, len, len + 4, line, linesz);
		if (memchr(line, '\0', linesz) == NULL)	/* the line must end inside its buffer */
			__builtin_trap();
		free(pkt);
		data += len;
		size -= len;
	}
	return 0;
}
