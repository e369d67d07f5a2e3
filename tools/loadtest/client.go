package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// client talks to one gateway over loopback with a bounded connection pool.
type client struct {
	base       string
	adminToken string
	hc         *fasthttp.HostClient
}

func newClient(base, adminToken string, conns int) (*client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" {
		return nil, fmt.Errorf("gateway %q: want an http:// URL", base)
	}
	host := u.Hostname()
	if host != "localhost" && !strings.HasPrefix(host, "127.") && host != "::1" {
		return nil, fmt.Errorf("gateway %q: the load tool only targets loopback", base)
	}
	return &client{base: strings.TrimSuffix(base, "/"), adminToken: adminToken, hc: &fasthttp.HostClient{
		Addr: u.Host, MaxConns: conns, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		MaxIdemponentCallAttempts: 1, MaxConnWaitTimeout: 30 * time.Second,
	}}, nil
}

// do sends one request and returns the status, decoding a success's body
// into into (when not nil).
func (c *client) do(method, path string, header map[string]string, body []byte, into any) (int, error) {
	return c.exchange(method, path, header, body, func(res *fasthttp.Response) error {
		if into != nil && res.StatusCode() < 300 {
			return json.Unmarshal(res.Body(), into)
		}
		return nil
	})
}

// send sends one request and returns the status and a copy of the body.
func (c *client) send(method, path string, header map[string]string, body []byte) (int, []byte, error) {
	var out []byte
	code, err := c.exchange(method, path, header, body, func(res *fasthttp.Response) error {
		out = append([]byte(nil), res.Body()...)
		return nil
	})
	return code, out, err
}

// exchange sends one request (a JSON body when body is not nil) and hands
// the response to read before it goes back to the pool.
func (c *client) exchange(method, path string, header map[string]string, body []byte, read func(*fasthttp.Response) error) (int, error) {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.Header.SetMethod(method)
	req.SetRequestURI(c.base + path)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	if err := c.hc.Do(req, res); err != nil {
		return 0, err
	}
	return res.StatusCode(), read(res)
}

func (c *client) admin(method, path string, body any, into any) error {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	code, err := c.do(method, path, map[string]string{"Authorization": "Bearer " + c.adminToken}, b, into)
	if err != nil {
		return err
	}
	if code >= 300 {
		return fmt.Errorf("%s %s: status %d", method, path, code)
	}
	return nil
}

// queueStats is the admin view of a queue.
type queueStats struct {
	Waiting       int64 `json:"waiting"`
	Active        int64 `json:"active"`
	AdmittedTotal int64 `json:"admittedTotal"`
	TargetActive  int64 `json:"targetActive"`
	AdaptiveLimit *struct {
		Limit  int64  `json:"limit"`
		Reason string `json:"reason"`
	} `json:"adaptiveLimit"`
}

// raw returns the body as text.
func (c *client) raw(method, path string) (int, string, error) {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.Header.SetMethod(method)
	req.SetRequestURI(c.base + path)
	if err := c.hc.Do(req, res); err != nil {
		return 0, "", err
	}
	return res.StatusCode(), string(res.Body()), nil
}
