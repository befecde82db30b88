package client

// Image is an image a request sends as an image_url content part. Its part
// is encoded once (NewImage): an image's URL is a data: URL of its bytes,
// hundreds of kilobytes, which escaping again for every request cost the
// load generator milliseconds of CPU per request.
type Image struct {
	URL  string
	part []byte // the content part's JSON; nil: encoded when sent
}

// NewImage returns the image at url (a data: URL, or any URL the server
// fetches) with its content part encoded.
func NewImage(url string) Image {
	return Image{URL: url, part: appendImagePart(nil, url)}
}

// appendImagePart appends {"type":"image_url","image_url":{"url":URL}}.
func appendImagePart(b []byte, url string) []byte {
	b = append(b, `{"type":"image_url","image_url":{"url":`...)
	b = appendJSONString(b, url)
	return append(b, "}}"...)
}

// appendImage appends im's content part.
func appendImage(b []byte, im Image) []byte {
	if im.part != nil {
		return append(b, im.part...)
	}
	return appendImagePart(b, im.URL)
}
